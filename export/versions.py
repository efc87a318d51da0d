"""The version folders of an export base, as TF Serving numbers them."""

import re

# TF Serving reads a version folder's name as an int64 of decimal digits.
MAX_VERSION = 2**63 - 1


def version_number(name):
    """The version of a folder called `name` ("7" or "7/"), or None when it is not one: ASCII
    decimal digits only (not "²", which `str.isdigit` accepts), in [1, 2**63)."""
    match = re.fullmatch(r"([0-9]+)/?", name)
    if match is None:
        return None
    number = int(match.group(1))
    return number if 1 <= number <= MAX_VERSION else None


def version_numbers(names):
    """The sorted versions among folder `names` (other names left out)."""
    return sorted(v for v in map(version_number, names) if v is not None)
