"""Word vocabulary: token <-> id, frequency-sorted, saved as one token per line."""

from __future__ import annotations

import collections
import hashlib
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

from psmm_tf.data.corpus import EOS_TOKEN, UNK_TOKEN, PathLike


def validate_ids(ids, vocab_size: int, name: str = "ids") -> np.ndarray:
    """Checks that `ids` is an integer array with values in [0, vocab_size).

    Args:
        ids: array-like of int, any shape.
        vocab_size: int. Number of ids in the vocabulary.
        name: str. Name of the argument, used in error messages.

    Returns:
        np.ndarray. `ids` as a numpy array (int dtype unchanged).

    Raises:
        ValueError: if `ids` is not integer-typed or has a value outside [0, vocab_size).
    """
    array = np.asarray(ids)
    if array.size == 0:
        return array.astype(np.int32)
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must be integer token ids, got dtype {array.dtype}.")
    low, high = int(array.min()), int(array.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"{name} holds id {bad}, outside the vocabulary range [0, {vocab_size}).")
    return array


class Vocabulary:
    """A word vocabulary with `<unk>` and `<eos>`, ids sorted by training frequency.

    Built vocabularies put `<unk>` at id 0 and `<eos>` at id 1, then the other words by count
    descending, ties broken alphabetically. The frequency order is what a log-uniform
    (Zipfian) sampled softmax assumes of the ids. The saved form is plain UTF-8 text, one token
    per line, line number (from 0) = id, so it can be used as a SavedModel asset and read by
    `tf.lookup.TextFileInitializer` with `TextFileIndex.WHOLE_LINE` / `LINE_NUMBER`.

    Args:
        tokens: sequence of str. The token of each id. Must contain `<unk>`, no duplicates, no
            empty strings and no whitespace inside a token.
        counts: optional sequence of int. The training count of each id (`counts[i]` for
            `tokens[i]`), kept by `build`; `None` for a loaded vocabulary.

    Example:
    ```python
    import os, tempfile
    from psmm_tf.data import Vocabulary

    vocab = Vocabulary.build("the cat sat on the mat <eos>".split())
    ids = vocab.encode(["the", "cat", "dog"])   # int32 [3]; "dog" is <unk>'s id
    path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    vocab.save(path)
    assert Vocabulary.load(path) == vocab
    ```
    """

    def __init__(self, tokens: Sequence[str], counts: Optional[Sequence[int]] = None):
        self._tokens = tuple(tokens)
        self._index = {}
        for i, token in enumerate(self._tokens):
            _check_token(token, f"token {i}")
            if token in self._index:
                raise ValueError(
                    f"Duplicate vocabulary token {token!r} at ids {self._index[token]} and {i}."
                )
            self._index[token] = i
        if UNK_TOKEN not in self._index:
            raise ValueError(f"A vocabulary needs the {UNK_TOKEN} token; it has none.")
        self._counts = None
        if counts is not None:
            self._counts = np.asarray(counts, dtype=np.int64)
            if self._counts.shape != (len(self._tokens),):
                raise ValueError(
                    f"counts has shape {self._counts.shape}; expected ({len(self._tokens)},)."
                )

    @classmethod
    def build(
        cls,
        tokens: Iterable[str],
        min_count: int = 1,
        max_size: Optional[int] = None,
        extra_tokens: Iterable[str] = (),
    ) -> "Vocabulary":
        """Builds a vocabulary from a token stream.

        Args:
            tokens: iterable of str. The training token stream (e.g. `read_tokens(...)`). A
                `<unk>` or `<eos>` already in it (as in PTB) is counted, not added twice.
            min_count: int. Words seen fewer times are left out (they become `<unk>`).
            max_size: optional int. Largest vocabulary size, `<unk>` and `<eos>` included;
                the most frequent words are kept.
            extra_tokens: iterable of str. Tokens added after the counted ones, whatever
                their count (count 0 if unseen), alphabetically: words that must get an id
                though training never shows them (e.g. held-out names of a synthetic corpus).

        Returns:
            Vocabulary. With `counts`: the count of each id in the training stream encoded by
            this vocabulary (`<unk>` also counts the words it replaces).
        """
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}.")
        if max_size is not None and max_size < 2:
            raise ValueError(f"max_size must be >= 2 (<unk> and <eos>), got {max_size}.")
        counter = collections.Counter(tokens)
        unk_count = counter.pop(UNK_TOKEN, 0)
        eos_count = counter.pop(EOS_TOKEN, 0)
        words = sorted(counter.items(), key=lambda item: (-item[1], item[0]))
        limit = None if max_size is None else max_size - 2
        kept = [(w, c) for w, c in words if c >= min_count][:limit]
        unk_count += sum(counter.values()) - sum(c for _, c in kept)
        kept_set = {w for w, _ in kept} | {UNK_TOKEN, EOS_TOKEN}
        extra = sorted(set(extra_tokens) - kept_set)
        vocab_tokens = [UNK_TOKEN, EOS_TOKEN] + [w for w, _ in kept] + extra
        # An extra token may have been seen but cut by min_count/max_size: its count then moves
        # back from <unk> to it.
        extra_counts = [counter.get(w, 0) for w in extra]
        unk_count -= sum(extra_counts)
        vocab_counts = [unk_count, eos_count] + [c for _, c in kept] + extra_counts
        return cls(vocab_tokens, vocab_counts)

    @classmethod
    def load(cls, path: PathLike) -> "Vocabulary":
        """Loads a vocabulary saved by `save` (one token per line, line number = id).

        Raises:
            FileNotFoundError: if the file does not exist.
            ValueError: for a path that is not a regular file, invalid UTF-8, an empty line,
                a token with whitespace, a duplicate token or a missing `<unk>`; the message
                names the file and line.
        """
        path = Path(path)
        if not path.is_file():
            if path.exists():  # a folder, or a FIFO that reading would wait on
                raise ValueError(f"Vocabulary file {path} is not a regular file (a folder, FIFO "
                                 f"or device); expected one token per line.")
            raise FileNotFoundError(f"Vocabulary file not found: {path}")
        data = path.read_bytes()
        if data.endswith(b"\n"):
            data = data[:-1]
        if not data:
            raise ValueError(f"Vocabulary file {path} is empty; expected one token per line.")
        tokens, seen = [], {}
        # Split on b"\n" only, as tf.lookup.TextFileInitializer does; str.splitlines() would
        # also split on \x1c, \u2028, ... and shift the ids against the exported model.
        for line_number, raw in enumerate(data.split(b"\n"), start=1):
            try:
                token = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(
                    f"{path}: line {line_number} is not valid UTF-8; expected a UTF-8 "
                    "vocabulary file."
                ) from None
            _check_token(token, f"{path}: line {line_number}")
            if token in seen:
                raise ValueError(
                    f"{path}: line {line_number}: duplicate token {token!r} (first on line "
                    f"{seen[token]}); each token must appear once."
                )
            seen[token] = line_number
            tokens.append(token)
        if UNK_TOKEN not in seen:
            raise ValueError(f"{path}: no {UNK_TOKEN} line; a vocabulary needs {UNK_TOKEN}.")
        return cls(tokens)

    def sha256(self) -> str:
        """sha256 (hex) of the tokens in id order: what `vocab.sha256`, model checkpoints and
        the checks of a vocabulary against a model compare."""
        return hashlib.sha256("\n".join(self._tokens).encode("utf-8")).hexdigest()

    def save(self, path: PathLike) -> None:
        """Writes the vocabulary as UTF-8, one token per line, line number (from 0) = id."""
        Path(path).write_text("".join(t + "\n" for t in self._tokens), encoding="utf-8")

    def encode(self, tokens: Iterable[str]) -> np.ndarray:
        """Maps tokens to ids, unknown tokens to `unk_id`.

        Args:
            tokens: iterable of str.

        Returns:
            np.ndarray. int32 [num_tokens].
        """
        get, unk = self._index.get, self.unk_id
        return np.fromiter((get(t, unk) for t in tokens), dtype=np.int32)

    def decode(self, ids) -> list[str]:
        """Maps ids back to tokens.

        Args:
            ids: array-like of int, 1-D, values in [0, len(self)).

        Returns:
            list[str]. The token of each id.
        """
        array = validate_ids(ids, len(self), "ids").reshape(-1)
        return [self._tokens[i] for i in array.tolist()]

    def token_to_id(self, token: str) -> int:
        """The id of `token`, or `unk_id` if it is not in the vocabulary."""
        return self._index.get(token, self.unk_id)

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token) -> bool:
        return token in self._index

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocabulary) and self._tokens == other._tokens

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)})"

    @property
    def tokens(self) -> tuple[str, ...]:
        """tuple[str, ...]. The token of each id."""
        return self._tokens

    @property
    def counts(self) -> Optional[np.ndarray]:
        """np.ndarray int64 [len(self)] of training counts, or None if loaded from a file."""
        return self._counts

    @property
    def unk_id(self) -> int:
        """int. Id of `<unk>` (0 for a built vocabulary)."""
        return self._index[UNK_TOKEN]

    @property
    def eos_id(self) -> Optional[int]:
        """int. Id of `<eos>` (1 for a built vocabulary), or None if the vocabulary lacks it."""
        return self._index.get(EOS_TOKEN)


def _check_token(token, where: str) -> None:
    if not isinstance(token, str):
        raise ValueError(f"{where}: vocabulary tokens must be str, got {type(token).__name__}.")
    if not token:
        raise ValueError(f"{where}: empty token; expected one non-empty token per line.")
    if len(token.split()) != 1 or token.strip() != token:
        raise ValueError(
            f"{where}: token {token!r} contains whitespace; tokens are whitespace-split words."
        )
