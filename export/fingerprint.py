"""The vocabulary fingerprint an export stamps on every stream state it makes.

Two exports of the same sizes take each other's state tensors, shapes and id ranges alike, but
the carried `memory_ids` and `last_id` name words of the vocabulary that made them: another
export would read other words. So `initial_state` writes the export's fingerprint into each
row (`vocabulary_fingerprint` int32 `(B,)`), the stream signatures refuse a row with another
one and pass it on unchanged (docs/hostile_inputs.md, row 242).
"""

import hashlib


def vocabulary_fingerprint(tokens):
    """The fingerprint of a vocabulary: a signed int32.

    The first 4 bytes of the SHA-256 of the tokens (in id order) joined by "\\n" and encoded as
    UTF-8, read big-endian as a signed 32-bit integer (the state's int32 dtype).

    Args:
        tokens: sequence of str, the vocabulary (line number = id).

    Returns:
        int in `[-2**31, 2**31)`.
    """
    digest = hashlib.sha256("\n".join(tokens).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big", signed=True)
