"""Reading a run's checkpoints back: their files, the one restore loop that skips a damaged
checkpoint, and the vocabulary a checkpoint records.

What a checkpoint holds and how training writes and resumes it is
`psmm_tf.training.checkpointing`; this module sits below every room that reads a checkpoint
(the run folder's `workdir.restore_model`, training's resume, psmm-export), so evaluation and
export read checkpoints without importing training (docs/architecture.md).
"""

import re
from pathlib import Path

import tensorflow as tf
from absl import logging

VOCABULARY_KEY = "vocabulary/.ATTRIBUTES/VARIABLE_VALUE"


def read_checkpoint_value(path, key, default=None):
    """The value checkpoint `path` stores under `key` (a NumPy scalar or array, bytes for a
    string), or `default` when it stores none: a value an older checkpoint lacks."""
    reader = tf.train.load_checkpoint(str(path))
    if not reader.has_tensor(key):
        return default
    return reader.get_tensor(key)


def check_checkpoint_vocabulary(path, vocabulary_sha256, error=ValueError):
    """Raises `error` when checkpoint `path` records another vocabulary than the one whose
    tokens hash to `vocabulary_sha256` (0.1.0's checkpoints record none)."""
    recorded = read_checkpoint_value(path, VOCABULARY_KEY)
    if recorded is None:
        return
    recorded = recorded.decode() if isinstance(recorded, bytes) else str(recorded)
    if recorded != vocabulary_sha256:
        raise error(f"Checkpoint {path} was trained with another vocabulary (sha256 "
                    f"{recorded[:16]}...) than the one given (sha256 {vocabulary_sha256[:16]}"
                    f"...): use the run's own vocab.txt.")


def checkpoint_paths(directory):
    """The checkpoint prefixes (`.../ckpt-N`) of `directory`, newest (highest N) first.

    Read from the files themselves, not the `checkpoint` index, so a damaged index hides none.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    numbered = []
    for index in directory.glob("ckpt-*.index"):
        match = re.fullmatch(r"ckpt-(\d+)\.index", index.name)
        if match:
            numbered.append((int(match.group(1)), str(directory / index.name[:-len(".index")])))
    return [path for _, path in sorted(numbered, reverse=True)]


# What reading a truncated or corrupted checkpoint raises (TF's reader: DataLossError, or an
# IndexError "Read less bytes than requested"; OpError covers a missing data shard).
_DAMAGED = (tf.errors.OpError, IndexError, ValueError)


def restore_first_readable(checkpoint, paths, require_match=True):
    """Restores the first of `paths` that can be read into `checkpoint`: the one loop that
    skips damaged checkpoints (training's resume, psmm-export, `load_model(..., "latest")`).

    A checkpoint that cannot be read (truncated, corrupted, a shard missing) is skipped for the
    next one, with a logged warning naming its files.

    Args:
        checkpoint: `tf.train.Checkpoint`.
        paths: checkpoint prefixes (`.../ckpt-N`), the preferred first.
        require_match: bool. Every object of `checkpoint` must be in the file: a checkpoint of
            another model raises AssertionError (it is not skipped). The file may always hold
            objects `checkpoint` does not (e.g. the optimizer's, for a model alone).

    Returns:
        `(path, failures)`: the prefix restored (None if none could be read) and a
        "path: reason" string per damaged one.
    """
    failures = []
    for path in paths:
        try:
            status = checkpoint.restore(path)
        except _DAMAGED as err:
            lines = str(err).strip().splitlines()
            reason = f"{type(err).__name__}: {lines[0] if lines else ''}"
            logging.warning("Checkpoint %s cannot be read (%s; files %s.index, %s.data-*); "
                            "falling back to the one before it, if any.", path, reason, path,
                            path)
            failures.append(f"{path}: {reason}")
            continue
        if require_match:
            try:
                status.assert_existing_objects_matched()
            except AssertionError as err:  # named: the caller may have tried several
                raise AssertionError(f"{path}: {str(err).splitlines()[0][:200]}") from None
        # Values of the file that `checkpoint` does not take (the vocabulary's hash, which a
        # resume checks on its own, the optimizer's for a model-only restore) are expected:
        # TF would otherwise warn of each as "could not be found in the restored object" (a
        # resumed run would print them for `(root).vocabulary`).
        status.expect_partial()
        return path, failures
    return None, failures
