"""The version folders of an export base, as TF Serving numbers them."""

import re

# TF Serving reads a version folder's name as an int64 of decimal digits.
MAX_VERSION = 2**63 - 1


def version_number(name):
    """The version of a folder called `name` ("7", "007" or "7/"), or None when it is not one:
    ASCII decimal digits only (not "²", which `str.isdigit` accepts), at most 2**63 - 1."""
    match = re.fullmatch(r"([0-9]+)/?", name)
    if match is None:
        return None
    number = int(match.group(1))
    return number if number <= MAX_VERSION else None


def version_folders(names):
    """{version: folder name} of the version folders among `names`, in version order (of two
    names of one version, "7" and "07", the shorter)."""
    folders = {}
    for name in sorted(names, key=len):
        number = version_number(name)
        if number is not None:
            folders.setdefault(number, name.rstrip("/"))
    return dict(sorted(folders.items()))
