"""Readers for whitespace-tokenised corpora (Penn Treebank, WikiText, plain text).

The format is the one of Mikolov et al.'s PTB and Merity et al.'s WikiText: every line is split
on whitespace and one `<eos>` is appended per line, blank lines included (a blank line is one
`<eos>` in the stream). With this rule the token counts match Table 1 of the pointer sentinel
paper: PTB 929,589 / 73,760 / 82,430 and WikiText-2 217,646 (valid) / 245,569 (test).

Files may be plain UTF-8 or gzip-compressed (`.gz`); the same reader serves a user's own text.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Iterable, Iterator, Union

import numpy as np

from psmm_tf.configs import SPLITS

EOS_TOKEN = "<eos>"
UNK_TOKEN = "<unk>"

# File names of each split, per dataset, in order of preference (the plain file wins over a
# gzipped copy when both exist).
_SPLIT_FILE_PATTERNS = {
    "ptb": ("ptb.{split}.txt", "ptb.{split}.txt.gz"),
    "wikitext2": ("wiki.{split}.tokens", "wiki.{split}.tokens.gz"),
    "wikitext103": ("wiki.{split}.tokens", "wiki.{split}.tokens.gz"),
    "text": ("{split}.txt", "{split}.txt.gz"),
}
DATASETS = tuple(_SPLIT_FILE_PATTERNS)

# `pathlib.Path` or any path object with `.open()` and `.name` (e.g. `etils.epath.Path`, which
# TFDS hands out for its download and manual directories).
PathLike = Union[str, os.PathLike]


def _as_path(path):
    return path if hasattr(path, "open") and hasattr(path, "name") else Path(path)


def check_corpus_directory(directory: PathLike) -> Path:
    """`directory` as a Path, where it is a folder.

    Raises:
        FileNotFoundError: it does not exist, or is not a folder (naming it and what was
            expected).
    """
    directory = _as_path(directory)
    if not directory.exists():
        raise FileNotFoundError(f"Corpus directory not found: {directory}; expected the folder "
                                f"of the corpus files.")
    if not directory.is_dir():
        raise FileNotFoundError(f"Corpus directory {directory} is not a folder; expected the "
                                f"folder of the corpus files.")
    return directory


def iter_lines(path: PathLike) -> Iterator[str]:
    """Yields the decoded lines of a text file, without their line ends.

    Args:
        path: str or path. A UTF-8 text file, gzip-compressed if the name ends in `.gz`.

    Yields:
        str. One line at a time, the trailing `\\n` (and `\\r`) removed; a UTF-8 byte order
        mark at the start of the file is dropped (it is not part of the first word).

    Raises:
        FileNotFoundError: if `path` does not exist.
        ValueError: if a line is not valid UTF-8 or holds a NUL character (a binary file, or
            UTF-16), the file starts with a UTF-16 byte order mark, its lines end in `\\r`
            alone (classic Mac OS line ends: the whole file would be one line), or a `.gz`
            file is not gzip, truncated or corrupted (the message names file and line number).
    """
    path = _as_path(path)
    if not path.exists():
        raise FileNotFoundError(f"Corpus file not found: {path}")
    with path.open("rb") as raw:
        compressed = path.name.endswith(".gz")
        yield from decode_lines(gzip.GzipFile(fileobj=raw) if compressed else raw, path,
                                compressed)


def decode_lines(raw_lines: Iterable[bytes], name, compressed: bool = False) -> Iterator[str]:
    """Decodes a text file's raw lines by `iter_lines`' rules (its reader, and psmm-score's).

    Args:
        raw_lines: iterable of bytes, one line each, with or without its line end; read one at
            a time (large corpora, WikiText-103, are never held whole).
        name: the file, as the messages name it.
        compressed: bool. `raw_lines` decompresses gzip: its read errors (not gzip, truncated,
            a failed CRC) become ValueErrors naming the file.

    Yields and raises: as `iter_lines` (ValueError, each message starting with `name`).
    """
    lines = enumerate(raw_lines, start=1)
    line_number = 0

    def read_next():
        try:
            return next(lines)
        except StopIteration:
            return None
        except (OSError, EOFError, zlib.error) as err:
            if not compressed:
                raise
            # Not gzip at all, truncated, or a failed CRC: name the file, not the module.
            raise ValueError(
                f"{name}: not a readable gzip file after line {line_number} ({err}); "
                f"expected a gzip-compressed UTF-8 text file (the name ends in .gz)."
            ) from None

    following = read_next()
    while following is not None:
        (line_number, line), following = following, None
        if line_number == 1 and line.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise ValueError(
                f"{name} starts with a UTF-16 byte order mark: a UTF-16 text file; "
                f"expected UTF-8 (convert it, e.g. iconv -f UTF-16 -t UTF-8).")
        try:
            text = line.decode("utf-8-sig" if line_number == 1 else "utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(
                f"{name}: line {line_number} is not valid UTF-8 ({err.reason} at byte "
                f"{err.start}); expected a UTF-8 text file."
            ) from None
        if "\x00" in text:
            raise ValueError(
                f"{name}: line {line_number} holds a NUL character (at character "
                f"{text.index(chr(0))}): a binary file, or UTF-16 text; expected a UTF-8 "
                f"text file.")
        if "\ufeff" in text:  # the one at the start of the file is dropped above
            raise ValueError(
                f"{name}: line {line_number} holds a byte order mark (U+FEFF) at character "
                f"{text.index(chr(0xFEFF))}: files joined with theirs (cat a.txt b.txt)? It "
                f"would become part of a word; expected it at the start of the file only "
                f"(remove it, e.g. sed 's/\\xEF\\xBB\\xBF//g').")
        text = text.rstrip("\r\n")
        if line_number == 1 and "\r" in text:
            # One line holding carriage returns: the file's only line, when \r alone ends
            # its lines. Looked ahead before it is yielded, so nothing of it is read.
            following = read_next()
            if following is None:
                raise ValueError(
                    f"{name}: its lines end in a carriage return (\\r) alone (classic Mac "
                    f"OS line ends), so the whole file would read as one line; expected "
                    f"\\n or \\r\\n line ends (convert it, e.g. tr '\\r' '\\n').")
        yield text
        if following is None:
            following = read_next()


def line_tokens(line: str) -> list[str]:
    """Tokens of one line: whitespace-split words followed by `<eos>`.

    Args:
        line: str. One line of text.

    Returns:
        list[str]. `line.split() + ["<eos>"]`; a blank line gives `["<eos>"]`.
    """
    return line.split() + [EOS_TOKEN]


def text_tokens(text: str, finish_last_line: bool = True) -> list[str]:
    """Tokens of a text read as a corpus file: each line's words followed by `<eos>`.

    Args:
        text: str.
        finish_last_line: bool. True (scoring): a final `\\n` ends the last line rather than
            starting an empty one, and every line ends with `<eos>`. False (a context for
            next-word prediction): the last line is unfinished and gets no `<eos>`.

    Returns:
        list[str].
    """
    if finish_last_line and text.endswith("\n"):
        text = text[:-1]
    tokens = []
    for line in text.split("\n"):
        tokens.extend(line_tokens(line))
    return tokens if finish_last_line else tokens[:-1]


def iter_tokens(path: PathLike) -> Iterator[str]:
    """Yields the tokens of a corpus file one at a time (see `read_tokens`)."""
    for line in iter_lines(path):
        yield from line.split()
        yield EOS_TOKEN


def read_tokens(path: PathLike) -> list[str]:
    """Reads a corpus file into its token stream.

    Args:
        path: str or path. A `.txt`, `.tokens` or other text file, or a `.gz` of one.

    Returns:
        list[str]. The words of every line, each line followed by one `<eos>`.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if the file is not UTF-8, or holds no line at all (empty corpus).
    """
    tokens = []
    for line in iter_lines(path):
        tokens.extend(line.split())
        tokens.append(EOS_TOKEN)
    if not tokens:
        raise ValueError(f"Corpus file {path} is empty; expected at least one line of text.")
    return tokens


def read_token_ids(path: PathLike, vocabulary) -> np.ndarray:
    """Reads and encodes a corpus file line by line, never holding all its strings.

    Use it for large corpora (WikiText-103: 103M tokens would take gigabytes as Python strings).

    Args:
        path: str or path. A corpus file as for `read_tokens`.
        vocabulary: `psmm_tf.data.Vocabulary`. Unknown words map to its `<unk>` id.

    Returns:
        np.ndarray. int32 [num_tokens], the ids of the token stream.

    Raises:
        FileNotFoundError, ValueError: as `read_tokens`.
    """
    chunks = []
    pending: list[str] = []
    for line in iter_lines(path):
        pending.extend(line.split())
        pending.append(EOS_TOKEN)
        if len(pending) >= 1 << 16:
            chunks.append(vocabulary.encode(pending))
            pending = []
    if pending:
        chunks.append(vocabulary.encode(pending))
    if not chunks:
        raise ValueError(f"Corpus file {path} is empty; expected at least one line of text.")
    return np.concatenate(chunks)


def split_file_names(dataset: str, split: str) -> tuple[str, ...]:
    """File names that may hold `split` of `dataset`, preferred first.

    Args:
        dataset: str. One of `"ptb"`, `"wikitext2"`, `"wikitext103"`, `"text"`.
        split: str. One of `"train"`, `"valid"`, `"test"`.

    Returns:
        tuple[str, ...]. E.g. `("ptb.valid.txt", "ptb.valid.txt.gz")`.
    """
    if dataset not in _SPLIT_FILE_PATTERNS:
        raise ValueError(f"Unknown dataset {dataset!r}; expected one of {DATASETS}.")
    if split not in SPLITS:
        raise ValueError(f"Unknown split {split!r}; expected one of {SPLITS}.")
    return tuple(p.format(split=split) for p in _SPLIT_FILE_PATTERNS[dataset])


def find_split_files(directory: PathLike, dataset: str) -> dict[str, Path]:
    """Finds the split files of `dataset` in `directory`.

    Args:
        directory: str or path. Folder holding the files directly (not in subfolders).
        dataset: str. One of `"ptb"` (ptb.{train,valid,test}.txt), `"wikitext2"` and
            `"wikitext103"` (wiki.{train,valid,test}.tokens), `"text"` ({train,valid,test}.txt);
            each may also be gzipped (`.gz`).

    Returns:
        dict[str, Path]. Split name -> file, for the splits present (possibly none).

    Raises:
        ValueError: for an unknown dataset, or a split's name that is not a readable file (a
            folder, or a link that leads nowhere) where no other file of the split is.
        FileNotFoundError: if `directory` does not exist or is not a folder.
    """
    directory = check_corpus_directory(directory)
    found = {}
    for split in SPLITS:
        names = split_file_names(dataset, split)
        for name in names:
            if (directory / name).is_file():
                found[split] = directory / name
                break
        else:
            for name in names:  # a split's name taken by something else: named, not "missing"
                if os.path.lexists(directory / name):
                    what = ("a folder" if (directory / name).is_dir() else
                            "a link that leads nowhere" if (directory / name).is_symlink()
                            else "not a regular file")
                    raise ValueError(f"{directory / name} is {what}; expected the {split} split's "
                                     f"text file.")
    return found


def load_splits(directory: PathLike, dataset: str) -> dict[str, list[str]]:
    """Reads the token streams of every split of `dataset` found in `directory`.

    Args:
        directory: str or path. See `find_split_files` for the file names looked for.
        dataset: str. One of `"ptb"`, `"wikitext2"`, `"wikitext103"`, `"text"`.

    Returns:
        dict[str, list[str]]. Split name (`"train"`, `"valid"`, `"test"`) -> token stream, for
        the splits present; e.g. only valid and test for the shared WikiText-2 copy.

    Raises:
        FileNotFoundError: if the directory is missing or holds none of the expected files.
        ValueError: for an unknown dataset, an empty split file or invalid UTF-8.
    """
    files = find_split_files(directory, dataset)
    if not files:
        expected = ", ".join(n for s in SPLITS for n in split_file_names(dataset, s))
        raise FileNotFoundError(
            f"No {dataset} split files in {directory}; expected at least one of: {expected}."
        )
    return {split: read_tokens(path) for split, path in files.items()}
