"""The run directory (workdir) in one place: its file names, writing and reading them.

A training run's workdir holds:
    config.json         `ExperimentConfig.to_json()` of the run (vocab_size and seeds resolved)
    vocab.txt           `Vocabulary.save`: one token per line, line number = id
    vocab.sha256        sha256 of the vocabulary's tokens (`vocabulary_hash`), checked wherever
                        a vocabulary is loaded with the run's model
    .lock               the pid of the run in progress (`run_setup.workdir_lock`)
    checkpoints/        `tf.train.Checkpoint` files (written by `psmm_tf.training.checkpointing`,
                        read by `psmm_tf.checkpoints`)
    model.keras         `model.save` of the best model so far by validation perplexity
    history.json        one record per finished epoch (perplexities, learning rate, timing)
    steps.jsonl         one JSON line per training step (epoch, step, loss, lr)
    results.json        the best model's validation and test perplexity, at the end
    initial_pointer.npz the pointer's weights before the first step (models with a sentinel)
    tensorboard/        TensorBoard runs (`psmm_tf.training.reporting`)
    synthetic_data/     the generated corpus of a `dataset="synthetic"` run
    evaluation_<split>/ psmm-evaluate's report (its default output folder)
    previous_run_<N>/   the training outputs of a run started again with `psmm-train --restart`

A run's model comes from one of two sources, always named by whoever loads it
(`MODEL_SOURCES`): "best" is `model.keras` (the best model by validation perplexity, written
at each improving validation) and "latest" the newest readable checkpoint (the state of
training, mid-epoch included).
"""

import json
import os
from pathlib import Path

from psmm_tf.models.presets import MODEL_FILE, read_model_file

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
VOCAB_HASH_FILE = "vocab.sha256"
LOCK_FILE = ".lock"
CHECKPOINT_DIR = "checkpoints"
# MODEL_FILE ("model.keras") is the presets' name: a run folder loads as a preset.
HISTORY_FILE = "history.json"
STEPS_FILE = "steps.jsonl"
RESULTS_FILE = "results.json"
# The pointer's weights at the start of training (W, b, s), for the pointer diagnostics.
INITIAL_POINTER_FILE = "initial_pointer.npz"
TENSORBOARD_DIR = "tensorboard"
SYNTHETIC_DATA_DIR = "synthetic_data"
# A character-output run (psmm_tf.training.char_output_training) keeps its settings here, beside
# checkpoints/, model.keras, history.json and results.json.
CHAR_OUTPUT_CONFIG_FILE = "char_output.json"

# What training writes: a workdir holding any of these has a run's history.
TRAINING_OUTPUTS = (CHECKPOINT_DIR, MODEL_FILE, HISTORY_FILE, STEPS_FILE, RESULTS_FILE,
                    INITIAL_POINTER_FILE, TENSORBOARD_DIR)
# The entries a start of psmm-train may create in a workdir before the run is validated: a
# refused start removes those it created, and nothing else (a user's files stay).
START_CREATES = frozenset({CONFIG_FILE, VOCAB_FILE, VOCAB_HASH_FILE, CHECKPOINT_DIR,
                           STEPS_FILE, INITIAL_POINTER_FILE, TENSORBOARD_DIR,
                           SYNTHETIC_DATA_DIR})
# The run's entries that are folders; every other named entry is a file.
RUN_FOLDERS = (CHECKPOINT_DIR, TENSORBOARD_DIR, SYNTHETIC_DATA_DIR)
RUN_FILES = (CONFIG_FILE, VOCAB_FILE, VOCAB_HASH_FILE, MODEL_FILE, HISTORY_FILE, STEPS_FILE,
             RESULTS_FILE, INITIAL_POINTER_FILE)
# `psmm-train --restart` moves a run's training outputs into `previous_run_<N>/`.
PREVIOUS_RUN_PREFIX = "previous_run_"

# Where a run's model is read from: "best" = model.keras, "latest" = the newest checkpoint.
MODEL_SOURCES = ("best", "latest")


def misplaced_entries(workdir):
    """The run's entries of the wrong kind (a file where a folder belongs, or the reverse):
    `{name: message naming it}`, empty for a sound workdir or one that does not exist."""
    workdir = Path(workdir)
    wrong = {name: f"{workdir / name} is not a folder: expected the run's {name} folder"
             for name in RUN_FOLDERS
             if os.path.lexists(workdir / name) and not (workdir / name).is_dir()}
    wrong.update({name: f"{workdir / name} is not a file: expected the run's {name}"
                  for name in RUN_FILES
                  if os.path.lexists(workdir / name) and not (workdir / name).is_file()})
    return wrong


def run_entries(workdir):
    """The entries of `workdir` that only a run of its own writes there (config.json,
    char_output.json and the training outputs, `TRAINING_OUTPUTS`), by name."""
    return [name for name in (CONFIG_FILE, CHAR_OUTPUT_CONFIG_FILE, *TRAINING_OUTPUTS)
            if os.path.lexists(Path(workdir) / name)]


def evaluation_dir(workdir, split):
    """psmm-evaluate's default report folder for `split`: `<workdir>/evaluation_<split>`."""
    return Path(workdir) / f"evaluation_{split}"


def worker_dir(workdir, worker_name):
    """The hidden scratch folder of a non-chief worker, `<workdir>/.<worker_name>`."""
    return Path(workdir) / f".{worker_name}"


def write_text_atomic(path, text):
    """Writes `text` (UTF-8) to `path` atomically (`write_bytes_atomic`)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path, data):
    """Writes `data` to `path` through a temporary file and a rename (never half a file; the
    temporary file is removed when the write fails)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException as error:  # a full disk, a kill: no half file left beside the whole one
        _name_file(error, path)
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path, value):
    """Writes `value` as JSON (indented, sorted keys) to `path` atomically."""
    write_text_atomic(path, json.dumps(value, indent=2, sort_keys=True))


def save_model_atomic(model, path):
    """`model.save` to a temporary `.keras` file, then a rename over `path`."""
    path = Path(path)
    tmp = path.with_name(".tmp-" + path.name)
    try:
        model.save(tmp)
        os.replace(tmp, path)
    except BaseException as error:
        _name_file(error, path)
        tmp.unlink(missing_ok=True)
        raise


def _name_file(error, path):
    """Names `path` in an OSError that names no file (a failed write or close of an open file,
    e.g. a full disk), so that its message says which file could not be written."""
    if isinstance(error, OSError) and not error.filename:
        error.filename = str(path)


def read_history(workdir):
    """The list of epoch records of `<workdir>/history.json` ([] when absent)."""
    path = Path(workdir) / HISTORY_FILE
    return json.loads(path.read_text()) if path.is_file() else []


def read_step_losses(workdir):
    """`{(epoch, step): loss}` from `steps.jsonl`; a step run twice (after a resume) keeps its
    last record, and a line cut by a kill is skipped."""
    losses = {}
    path = Path(workdir) / STEPS_FILE
    if not path.is_file():
        return losses
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        losses[(record["epoch"], record["step"])] = record["loss"]
    return losses


def load_config(workdir, error=ValueError):
    """The `ExperimentConfig` of `<workdir>/config.json`.

    Raises:
        `error` (a ValueError subclass): the file is missing, or is not a run's config (cut
            JSON, another file), naming it.
    """
    from psmm_tf.configs import ExperimentConfig

    path = Path(workdir) / CONFIG_FILE
    try:
        return ExperimentConfig.from_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"No {path}: expected the folder of a training run.") from None
    except NotADirectoryError:
        raise error(f"{workdir} is a file, not a folder: expected the folder of a training run "
                    f"(its {CONFIG_FILE}, {VOCAB_FILE}, {MODEL_FILE}).") from None
    except (ValueError, TypeError, KeyError, AttributeError) as err:  # JSONDecodeError too
        raise error(f"{path} is not a training run's config ({type(err).__name__}: {err}); "
                    "restore it from a backup, or start a new run in another workdir.") from None


def write_config(workdir, config):
    """Writes `<workdir>/config.json` atomically."""
    write_text_atomic(Path(workdir) / CONFIG_FILE, config.to_json())


def vocabulary_hash(path):
    """sha256 (hex) of the tokens of vocabulary file `path`, in order (one per line)."""
    from psmm_tf.data.vocabulary import Vocabulary

    return Vocabulary.load(path).sha256()


def write_vocabulary(workdir, vocabulary):
    """Writes `<workdir>/vocab.txt` and `vocab.sha256` where missing (a resumed run keeps its
    own)."""
    workdir = Path(workdir)
    if not (workdir / VOCAB_FILE).is_file():
        vocabulary.save(workdir / VOCAB_FILE)
    if not (workdir / VOCAB_HASH_FILE).is_file():
        write_vocabulary_hash(workdir)


def write_vocabulary_hash(workdir):
    """Writes `<workdir>/vocab.sha256` (`sha256sum` format) for `<workdir>/vocab.txt`."""
    workdir = Path(workdir)
    digest = vocabulary_hash(workdir / VOCAB_FILE)
    (workdir / VOCAB_HASH_FILE).write_text(f"{digest}  {VOCAB_FILE}\n")


def load_vocabulary(run_dir, error=ValueError):
    """The `vocab.txt` of the run in `run_dir`, checked against its `vocab.sha256`.

    Raises:
        `error` (a ValueError subclass, e.g. the caller's own): the vocabulary is not the run's.
    """
    from psmm_tf.data.vocabulary import Vocabulary

    vocab_path = Path(run_dir) / VOCAB_FILE
    try:
        check_vocabulary(vocab_path, run_dir)
    except ValueError as err:
        raise error(str(err)) from None
    return Vocabulary.load(vocab_path)


def read_text_file(path, expected):
    """The UTF-8 text of the file `path`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: `path` is not a regular file (a folder, or a FIFO that reading would wait
            on) or not UTF-8 text; the message names it and `expected` (e.g. "the run's
            config.json").
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ValueError(f"{path} is not a regular file (a folder, FIFO or device); expected "
                         f"{expected}.")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        bad = err.object[err.start:err.start + 1]
        raise ValueError(f"{path} is not UTF-8 text (byte {err.start}: {bad!r}); expected "
                         f"{expected}.") from None


def check_vocabulary(vocab_path, run_dir):
    """Raises ValueError when `vocab_path` is not the vocabulary the run in `run_dir` trained on.

    The run's `vocab.sha256` (written when it started) is the reference; a run without one
    (older runs) is not checked.

    Returns:
        True when the vocabulary was checked, False when `run_dir` has no `vocab.sha256`.
    """
    hash_path = Path(run_dir) / VOCAB_HASH_FILE
    if not hash_path.is_file():
        return False
    recorded = read_text_file(hash_path, "the sha256 of the run's vocabulary, which "
                              "psmm-train writes").split()
    expected = recorded[0] if recorded else ""
    actual = vocabulary_hash(vocab_path)
    if actual != expected:
        raise ValueError(
            f"Vocabulary {vocab_path} is not the one the model of {run_dir} was trained with: "
            f"its tokens hash to sha256 {actual[:16]}..., {hash_path} records "
            f"{expected[:16]}... (same words in another order, or other words). Use the run's "
            f"own {VOCAB_FILE}.")
    return True


def check_model_source(model_source):
    """Raises ValueError unless `model_source` is one of `MODEL_SOURCES`."""
    if model_source not in MODEL_SOURCES:
        raise ValueError(f"model_source must be one of {', '.join(MODEL_SOURCES)} (best: "
                         f"{MODEL_FILE}, latest: the newest checkpoint), got {model_source!r}.")


def describe_model_source(model_source, path):
    """One line naming the model loaded, e.g. "best (model.keras): /runs/a/model.keras"."""
    what = MODEL_FILE if model_source == "best" else "latest checkpoint"
    return f"{model_source} ({what}): {path}"


def load_model(workdir, model_source, config=None, vocabulary=None, error=ValueError):
    """The model of the run in `workdir`, from the source named by `model_source`.

    Args:
        workdir: str or path. A training run's folder.
        model_source: "best" (`model.keras`) or "latest" (the newest readable checkpoint,
            restored into the model `config` describes, with `vocabulary`).
        config: the run's `ExperimentConfig` (default: its `config.json`): "latest" builds its
            model; "best" checks that `model.keras` is that model (sizes and kind).
        vocabulary: the run's `Vocabulary` (default: its checked `vocab.txt`): "latest" gives
            it to the model and checks it against the checkpoint's recorded hash; "best" checks
            it against the vocabulary saved inside `model.keras`.
        error: the ValueError subclass raised.

    Returns:
        `(model, path)`: the Keras model and the file or checkpoint prefix it was read from.

    Raises:
        `error`: `model.keras` is missing, damaged or of another model than the config's
            ("best"), or no checkpoint exists or every one is damaged ("latest"), naming the
            files.
    """
    check_model_source(model_source)
    workdir = Path(workdir)
    if model_source == "best":
        path = workdir / MODEL_FILE
        if not path.is_file():
            raise error(f"{workdir} holds no {MODEL_FILE} (the best model, written at the "
                        "first validation that improves); use model_source=latest for its "
                        "newest checkpoint.")
        model = read_model_file(path, error, advice=" Move it away, or use model_source=latest "
                                                    "for the newest checkpoint.")
        if config is None and (workdir / CONFIG_FILE).is_file():
            config = load_config(workdir, error=error)
        if vocabulary is None and (workdir / VOCAB_FILE).is_file():
            vocabulary = load_vocabulary(workdir, error=error)
        check_loaded_model(model, path, config, vocabulary, error)
        return model, str(path)
    config = config if config is not None else load_config(workdir, error)
    vocabulary = vocabulary if vocabulary is not None else load_vocabulary(workdir, error)
    try:
        return restore_model(config, vocabulary, workdir / CHECKPOINT_DIR, error)
    except FileNotFoundError:
        raise error(f"{workdir} holds no checkpoint ({CHECKPOINT_DIR}/ckpt-N): no trained "
                    "model to load as model_source=latest.") from None


def check_loaded_model(model, path, config=None, vocabulary=None, error=ValueError):
    """Checks a model read from `path` against the run's `ExperimentConfig` (kind and sizes)
    and `Vocabulary` (the one saved inside it); None skips a check. Raises `error`."""
    if config is not None:
        check_model_matches(model, config.model, path, error)
    if vocabulary is not None:
        check_model_vocabulary(model, vocabulary, path, error)


def restore_model(config, vocabulary, checkpoint, error=ValueError, name=None):
    """The model `config` describes, with `vocabulary`, restored from a checkpoint (the one
    checkpoint loader of the package: `load_model`'s "latest" and psmm-export's --checkpoint).

    Args:
        config: `ExperimentConfig` of the run that wrote the checkpoint.
        vocabulary: its `Vocabulary`; checked against the hash the checkpoint records.
        checkpoint: str or path. A prefix (`.../ckpt-12`) or a folder: its newest readable
            checkpoint, a damaged one skipped for the one before it with a logged warning.
        error: the ValueError subclass raised.
        name: how messages name `checkpoint` (e.g. "--checkpoint=<path>"; default the path).

    Returns:
        `(model, path)`: the model and the checkpoint prefix restored.

    Raises:
        FileNotFoundError: no checkpoint there.
        `error`: every checkpoint is damaged, one holds another model (kind or size), or it
            was trained with another vocabulary.
    """
    import tensorflow as tf
    from absl import logging

    from psmm_tf import checkpoints
    from psmm_tf.models import build_model

    checkpoint = str(checkpoint)
    name = name or checkpoint
    if os.path.isdir(checkpoint):
        paths = checkpoints.checkpoint_paths(checkpoint)
        if not paths:
            raise FileNotFoundError(f"No checkpoint in {name} (no ckpt-N.index file).")
    elif os.path.isfile(checkpoint + ".index"):
        paths = [checkpoint]
    else:
        raise FileNotFoundError(
            f"{name}: no {checkpoint}.index; expected a checkpoint prefix such as "
            "<workdir>/checkpoints/ckpt-12, or a folder of checkpoints.")
    model = build_model(config.model, dtype=config.train.mixed_precision)
    model.set_vocabulary(vocabulary.tokens)
    try:
        path, failures = checkpoints.restore_first_readable(
            tf.train.Checkpoint(model=model), paths)
    except AssertionError as err:
        raise error(f"Checkpoint {str(err)[:300]}: it does not hold the model the config "
                    f"describes (another model kind or size); give the config of the run "
                    f"that wrote it.") from None
    if path is None:
        raise error(f"No checkpoint of {name} can be read: {'; '.join(failures)}. The files "
                    "are damaged.")
    if failures:
        logging.warning("Loading the older checkpoint %s.", path)
    checkpoints.check_checkpoint_vocabulary(path, vocabulary.sha256(), error)
    return model, path


def move_training_outputs(workdir):
    """Moves the training outputs of `workdir` into a new `previous_run_<N>/` (a restarted run,
    `--restart`), saying so in one log line; returns its path (None when there were none).
    Nothing is deleted."""
    from absl import logging

    workdir = Path(workdir)
    present = [name for name in TRAINING_OUTPUTS if os.path.lexists(workdir / name)]
    if not present:
        return None
    number = 1
    while os.path.lexists(workdir / f"{PREVIOUS_RUN_PREFIX}{number}"):
        number += 1
    target = workdir / f"{PREVIOUS_RUN_PREFIX}{number}"
    target.mkdir()
    for name in present:
        os.rename(workdir / name, target / name)
    logging.warning("--restart: the previous run's files were moved into %s.", target)
    return target


def check_model_matches(model, model_config, path, error=ValueError):
    """Raises `error` unless the model read from `path` is the one `model_config` describes
    (e.g. a model.keras copied from another run)."""
    from psmm_tf.models import model_config_differences

    differences = model_config_differences(model, model_config)
    if differences:
        raise error(f"{path} is not the model its run's config describes ("
                    + "; ".join(differences) + "): was it copied from another run? Restore the "
                    "run's own file, or use model_source=latest for its newest checkpoint.")


def check_model_vocabulary(model, vocabulary, path, error=ValueError):
    """Raises `error` when the vocabulary saved inside a `.keras` model (its preprocessor's) is
    not `vocabulary`: a vocab.txt and vocab.sha256 copied from another run agree with each
    other, not with the model. Models saved without a preprocessor are not checked."""
    preprocessor = getattr(getattr(model, "base_model", model), "preprocessor", None)
    own = getattr(preprocessor, "vocabulary", None)
    if own is not None and own.sha256() != vocabulary.sha256():
        raise error(f"{path} was trained with another vocabulary (its own, saved inside it: "
                    f"{len(own)} tokens, sha256 {own.sha256()[:16]}...) than the run's "
                    f"{VOCAB_FILE} ({len(vocabulary)} tokens, sha256 "
                    f"{vocabulary.sha256()[:16]}...): restore the run's own {VOCAB_FILE} and "
                    f"{VOCAB_HASH_FILE}.")
