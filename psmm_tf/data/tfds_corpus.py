"""A corpus read through its TFDS builder: prepared once into a TFDS data dir, then read back.

The one data path of `psmm-train` and `psmm-evaluate` for ptb, wikitext2, wikitext103 and text:

    data_dir (the builder's manual_dir; only read)
      -> checked: the folder exists and holds the dataset's files, each one readable
      -> `download_and_prepare` into <tfds_data_dir>/<builder>/<version>/ (only the first time)
      -> the prepared shards read back, one line per example in corpus order
      -> token lists: each line's words and one `<eos>`, as `corpus.load_splits` returns them.

`tfds_data_dir` None means TFDS's own default (`~/tensorflow_datasets`, or `$TFDS_DATA_DIR`),
where `tfds build --imports=psmm_tf.data.tfds_builders ptb --manual_dir=<folder>` writes too, so
a dataset prepared either way is read by the other. A prepared dataset records the SHA-256 of
the files it came from (`tfds_builders.source_fingerprint`) and is reused only for the same
files: a dataset prepared from other files (another `text` folder, say) keeps its place, and the
new one is prepared beside it in <tfds_data_dir>/psmm_tf_sources/<first 16 hex digits>/.
Without a data_dir, ptb and the WikiTexts reuse a prepared dataset or download the official
archive (`checksums.tsv`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import tensorflow as tf
import tensorflow_datasets as tfds

from psmm_tf.data import corpus, tfds_builders

# Dataset names of `DataConfig` -> TFDS builder names.
BUILDER_NAMES = {"ptb": "ptb", "wikitext2": "wikitext2", "wikitext103": "wikitext103",
                 "text": "plain_text"}
# Folder (under the TFDS data dir) of datasets prepared from other files than the first.
SOURCES_DIR = "psmm_tf_sources"
_CORPUS_SPLITS = {"train": "train", "validation": "valid", "test": "test"}


def source_files(dataset: str, data_dir) -> dict:
    """Finds and checks the split files of `dataset` in `data_dir`; reads them, writes nothing.

    Args:
        dataset: str. "ptb", "wikitext2", "wikitext103" or "text".
        data_dir: str or path. The folder of the files (or the archive's folder inside it).

    Returns:
        dict split name ("train", "valid", "test") -> Path, for the splits present.

    Raises:
        ValueError: an unknown dataset.
        FileNotFoundError: the folder is missing or holds none of the dataset's files.
    """
    builder_class = _builder_class(dataset)
    directory = corpus.check_corpus_directory(data_dir)
    files = builder_class.find_files(directory)
    if not files:
        raise FileNotFoundError(
            f"No {dataset} split files in {directory}; expected "
            f"{builder_class.expected_files()}."
        )
    return files


def check_readable(files: dict) -> None:
    """Reads every line of every file once: an empty, non-gzip or non-UTF-8 file is refused.

    Raises:
        ValueError: naming the file (and line) that cannot be read, or the empty file.
    """
    for path in files.values():
        lines = 0
        for _ in corpus.iter_lines(path):
            lines += 1
        if not lines:
            raise ValueError(f"Corpus file {path} is empty; expected at least one line of text.")


def check_tfds_data_dir_apart(tfds_data_dir: Optional[str], data_dir=None) -> None:
    """Refuses a `tfds_data_dir` that is `data_dir` or inside it: TFDS would write the prepared
    dataset into the corpus folder, which is only read. Writes nothing; None is not checked.

    Raises:
        ValueError: naming both (`--tfds_data_dir` and `--data_dir`).
    """
    if tfds_data_dir is None or data_dir is None:
        return
    tfds_path, data_path = Path(tfds_data_dir).resolve(), Path(data_dir).resolve()
    if tfds_path == data_path or data_path in tfds_path.parents:
        where = "is" if tfds_path == data_path else "is inside"
        raise ValueError(
            f"tfds_data_dir={tfds_data_dir} (--tfds_data_dir) {where} data_dir={data_dir} "
            f"(--data_dir): the prepared TFDS dataset would be written into the corpus folder, "
            f"which is only read; give a --tfds_data_dir outside it (or none: TFDS's default).")


def check_tfds_data_dir(tfds_data_dir: Optional[str], data_dir=None) -> None:
    """Refuses a `tfds_data_dir` that is not a folder, or that cannot hold a new dataset, or
    that is `data_dir` (the corpus folder, only read) or inside it (`check_tfds_data_dir_apart`).

    The nearest existing folder of the path must be writable: a missing folder is made by
    TFDS when it prepares the first dataset there. None (TFDS's default) is not checked.

    Raises:
        NotADirectoryError: the path, or a part of it, is not a folder.
        PermissionError: the folder (or its nearest existing parent) is not writable.
        ValueError: the path is `data_dir` or inside it.
    """
    if tfds_data_dir is None:
        return
    check_tfds_data_dir_apart(tfds_data_dir, data_dir)
    expected = "expected a folder for the prepared TFDS datasets (made if missing)"
    path = Path(tfds_data_dir).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise NotADirectoryError(f"tfds_data_dir={tfds_data_dir}: {existing} is not a folder; "
                                 f"{expected}.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"tfds_data_dir={tfds_data_dir}: {existing} is not writable; "
                              f"{expected}.")


def prepared_builder(dataset: str, data_dir=None, tfds_data_dir: Optional[str] = None):
    """The builder of `dataset`, prepared from `data_dir` (only the first time for these files).

    Args:
        dataset: str. "ptb", "wikitext2", "wikitext103" or "text".
        data_dir: str or path, or None. The builder's manual_dir; None: the official download
            (not for "text").
        tfds_data_dir: str or None. Where prepared datasets live; None: TFDS's default.

    Returns:
        `tfds.core.DatasetBuilder`, prepared.

    Raises:
        ValueError, FileNotFoundError: as `source_files` and `check_readable`, before anything
            is written; FileNotFoundError also for a failed download. ValueError also for a
            `tfds_data_dir` that is `data_dir` or inside it (`check_tfds_data_dir_apart`).
        NotADirectoryError, PermissionError: as `check_tfds_data_dir`, where the dataset is
            not prepared yet (a prepared one is read from a read-only folder).
    """
    builder_class = _builder_class(dataset)
    if data_dir is None:
        if dataset == "text":
            raise ValueError("dataset='text' needs data_dir: the folder of its files.")
        builder = builder_class(data_dir=tfds_data_dir)
        if not builder.is_prepared():
            check_tfds_data_dir(tfds_data_dir)
            builder.download_and_prepare()
        return builder
    check_tfds_data_dir_apart(tfds_data_dir, data_dir)  # even to read: a mistake either way
    files = source_files(dataset, data_dir)
    source = tfds_builders.source_fingerprint(files)
    builder = builder_class(data_dir=tfds_data_dir)
    if builder.is_prepared():
        if _recorded_source(builder) == source:
            return builder
        root = builder.data_path.parent.parent  # <root>/<name>/<version>
        builder = builder_class(data_dir=str(root / SOURCES_DIR / source[:16]))
        if builder.is_prepared() and _recorded_source(builder) == source:
            return builder
    check_readable(files)
    check_tfds_data_dir(tfds_data_dir, data_dir)
    try:
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(manual_dir=str(data_dir))
        )
    except OSError:
        # Another process (a worker of the same run) may have prepared the same files first:
        # TFDS then fails to move its own copy into place. Read theirs.
        builder = builder_class(data_dir=str(builder.data_path.parent.parent))
        if not (builder.is_prepared() and _recorded_source(builder) == source):
            raise
    return builder


def load_splits(dataset: str, data_dir=None, tfds_data_dir: Optional[str] = None) -> dict:
    """The token streams of every split, read through the prepared TFDS dataset.

    Args:
        dataset, data_dir, tfds_data_dir: as `prepared_builder`.

    Returns:
        dict split name ("train", "valid", "test") -> list[str], for the splits present:
        equal to `corpus.load_splits(data_dir, dataset)`.
    """
    builder = prepared_builder(dataset, data_dir, tfds_data_dir)
    return _read_splits(builder)


def load_data_config(data_config) -> tuple:
    """`load_splits` for a `DataConfig`'s dataset, data_dir and tfds_data_dir.

    Returns:
        `(tokens, directory)`: the dict of `load_splits`, and the folder the corpus came from
        (data_dir, or the prepared dataset's folder where no data_dir was given).
    """
    dataset, data_dir, train_split = (data_config.dataset, data_config.data_dir,
                                      data_config.train_split)
    if data_dir is not None:  # Refuse a missing training file before preparing anything.
        files = source_files(dataset, data_dir)
        if train_split not in files:
            raise ValueError(
                f"No {train_split!r} file for dataset {dataset!r} in {data_dir} (found: "
                f"{sorted(files)}); set train_split to a split that exists."
            )
    builder = prepared_builder(dataset, data_dir, data_config.tfds_data_dir)
    return _read_splits(builder), Path(data_config.data_dir or builder.data_path)


def read_split(builder, split: str) -> list:
    """One split's lines, in corpus order, as words with one `<eos>` per line.

    Raises:
        ValueError: a shard of the prepared dataset is missing, cut, corrupted or holds another
            number of lines than the dataset's info records (naming the folder).
    """
    tokens, lines = [], 0
    try:
        for batch in _line_batches(builder, split):
            for line in batch:
                tokens.extend(line.decode("utf-8").split())
                tokens.append(corpus.EOS_TOKEN)
            lines += len(batch)
    except (tf.errors.NotFoundError, tf.errors.DataLossError, UnicodeDecodeError) as err:
        raise _damaged(builder, split, f"{type(err).__name__}: "
                                       f"{getattr(err, 'message', err)}") from None
    expected = builder.info.splits[split].num_examples
    if lines != expected:  # e.g. a shard emptied: it reads without an error
        raise _damaged(builder, split, f"{lines} lines read, its info records {expected}")
    return tokens


def _damaged(builder, split, detail):
    """The error of a prepared dataset whose files no longer read as written."""
    return ValueError(
        f"The prepared dataset {builder.data_path} is damaged ({split!r} split: "
        f"{detail.splitlines()[0]}). Remove that folder and run the command again: it is "
        f"prepared again from its source files.")


def _line_batches(builder, split, batch_size=4096):
    """Arrays of the split's lines (UTF-8 bytes), in corpus order.

    The builders set disable_shuffling, so their shards are the corpus in order. TFRecord
    shards are parsed here in batches straight from the files TFDS wrote (the text feature is
    stored as its UTF-8 bytes), not example by example as `as_dataset` does. Other file formats
    go through `as_dataset`.
    """
    if _tfrecord_shards(builder):
        files = [str(path) for path in builder.info.splits[split].filepaths]
        spec = {"text": tf.io.FixedLenFeature([], tf.string)}
        records = tf.data.TFRecordDataset(files).batch(batch_size)
        for batch in records.map(lambda x: tf.io.parse_example(x, spec)).as_numpy_iterator():
            yield batch["text"]
        return
    batches = builder.as_dataset(split=split, shuffle_files=False, batch_size=batch_size)
    for batch in tfds.as_numpy(batches):
        yield batch["text"]


def _tfrecord_shards(builder):
    """Whether the prepared dataset's shards are TFRecord files (read directly)."""
    return builder.info.file_format == tfds.core.FileFormat.TFRECORD


def _read_splits(builder):
    return {_CORPUS_SPLITS[split]: read_split(builder, split)
            for split in builder.info.splits if split in _CORPUS_SPLITS}


def _builder_class(dataset):
    if dataset not in BUILDER_NAMES:
        raise ValueError(f"Unknown dataset {dataset!r}; expected one of {tuple(BUILDER_NAMES)}.")
    return tfds_builders.BUILDERS[BUILDER_NAMES[dataset]]


def _recorded_source(builder):
    metadata = builder.info.metadata
    return metadata.get("source_sha256") if metadata is not None else None
