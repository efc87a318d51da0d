"""Preparing a run's workdir: the resolved config, the vocabulary, resuming checks, the lock.

A run is validated (corpus, config against a resumed run, vocabulary) before it writes its
`config.json` and `vocab.txt` (`write_run_files`), so a run refused at start leaves nothing that
blocks the corrected command. `workdir_lock` keeps a second run out of a workdir in use.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import tensorflow as tf
from absl import logging

from psmm_tf import workdir as run_files
from psmm_tf.checkpoints import checkpoint_paths
from psmm_tf.configs import ExperimentConfig
from psmm_tf.data import corpus_setup
from psmm_tf.data.windows import steps_per_epoch
from psmm_tf.evaluation import pointer_diagnostics
from psmm_tf.models.registry import BASELINE_KIND, model_kinds
from psmm_tf.training import distribution


class RunRefusedError(ValueError):
    """A run refused at start (its data, config, vocabulary or workdir); nothing was written."""


class WorkdirLockedError(RunRefusedError):
    """Another run holds the workdir's lock file."""

# Fields a resumed run may change: they affect how long or how fast it runs, or where its corpus
# is prepared (TFDS), not what it learns.
RESUMABLE_CHANGES = frozenset({
    "train.max_epochs", "train.jit_compile", "train.native", "train.checkpoint_every_steps",
    "train.keep_checkpoints", "data.tfds_data_dir",
    # Resolved, not given: a resume from a checkpoint keeps the recorded one (prepare_workdir).
    "train.init_from_sha256",
})


def resolve_jit_compile(mode):
    """"auto" -> XLA where a GPU is present (the scan LSTM compiles well there; on a CPU XLA is
    slower for these LSTMs: docs/results.md's XLA rows), "on" -> True, "off" -> False."""
    if mode == "auto":
        return bool(tf.config.list_logical_devices("GPU"))
    return mode == "on"


def config_differences(old, new):
    """Dotted names of the fields where two `ExperimentConfig`s differ (as config.json holds
    them: a model hyperparameter by its own name)."""
    old_dict, new_dict = json.loads(old.to_json()), json.loads(new.to_json())
    return sorted(f"{part}.{name}" for part in old_dict
                  for name in {*old_dict[part], *new_dict[part]}
                  if old_dict[part].get(name) != new_dict[part].get(name))


def prepare_workdir(config, workdir, strategy, restart=False):
    """Resolves the config against the data and the workdir; writes none of the run's files.

    The vocabulary size is set from the data and a missing model seed from `train.seed`. A
    workdir that already holds a run must have been started with the same config, except for
    the fields in `RESUMABLE_CHANGES`; its `vocab.txt` is reused (and must match the run's
    `vocab.sha256`). A new run with `model.base_model` (an input-to-output gate run) takes the
    vocabulary of the base model's run, `<folder of base_model>/vocab.txt`. The training split
    must fill at least one window of every stream, and the validation split must exist.
    Only the synthetic corpus is written (into `<workdir>/synthetic_data`); `write_run_files`
    writes the run's own files once the run has started.

    Args:
        config: `ExperimentConfig` (e.g. from flags).
        workdir: str or path.
        strategy: the run's `tf.distribute.Strategy` (only its chief writes files).
        restart: bool. The caller will move the run's training outputs aside and start it
            again (`psmm-train --restart`): a trained run without a checkpoint is then allowed.

    Returns:
        `(config, corpus)`: the resolved `ExperimentConfig` and the `corpus_setup.Corpus`.

    Raises:
        RunRefusedError (a ValueError): the workdir holds a run with another config or another
            vocabulary, or the corpus is missing, unreadable or too short for the config, or
            `model.base_model` has no `vocab.txt` of its run beside it, or the strategy's
            replicas cannot share `train.batch_size` evenly, or the workdir holds another
            kind of run (`check_workdir_holds`), or a vocab.txt or vocab.sha256 but no run
            (no config.json, no checkpoint).
    """
    workdir = Path(workdir)
    chief = distribution.is_chief(strategy)
    try:  # the replicas of a multi-worker strategy are known only once it runs
        distribution.rows_per_replica(config.train.batch_size, strategy)
    except ValueError as err:
        raise RunRefusedError(str(err)) from None
    check_workdir_holds(workdir, "run")
    check_resumable(workdir, restart)
    config_path = workdir / run_files.CONFIG_FILE
    vocab_path = workdir / run_files.VOCAB_FILE
    _check_vocabulary_has_its_run(workdir)
    stored = None
    if config_path.is_file():
        try:
            stored = ExperimentConfig.from_json(config_path.read_text(encoding="utf-8"))
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            raise RunRefusedError(
                f"{config_path} is not a training run's config ({type(err).__name__}: {err}); "
                f"restore it, or start the new run in another workdir.") from None
    init_model = None
    if config.train.init_from is not None:
        init_model = load_init_model(config.train.init_from)
        # The model a run started from, by content: init_from's model.keras changes whenever
        # its run trains on. A resume from a checkpoint keeps the hash it started from.
        sha256 = init_model_sha256(config.train.init_from)
        if (stored is not None and stored.train.init_from_sha256 is not None
                and checkpoint_paths(workdir / run_files.CHECKPOINT_DIR)):
            sha256 = stored.train.init_from_sha256
        config = config.replace(train={"init_from_sha256": sha256})
    if vocab_path.is_file():
        vocabulary = run_files.load_vocabulary(workdir, error=RunRefusedError)
    elif init_model is not None:
        vocabulary = init_model.preprocessor.vocabulary
    else:
        vocabulary = _base_vocabulary(config)
    scratch = workdir / run_files.SYNTHETIC_DATA_DIR
    if not chief:
        scratch = (run_files.worker_dir(workdir, distribution.worker_name(strategy))
                   / run_files.SYNTHETIC_DATA_DIR)
    try:
        corpus = corpus_setup.load_corpus(config.data, scratch_dir=scratch,
                                          vocabulary=vocabulary,
                                          max_word_length=config.model.spelling_length)
    except (FileNotFoundError, NotADirectoryError, PermissionError, ValueError) as err:
        raise RunRefusedError(f"Corpus (dataset={config.data.dataset!r}, data_dir="
                              f"{config.data.data_dir}): {err}") from None
    _check_corpus_fits(config, corpus)
    seed = config.model.seed if config.model.seed is not None else config.train.seed
    config = config.replace(model={"vocab_size": len(corpus.vocabulary), "seed": seed})
    if init_model is not None:
        from psmm_tf.models import model_config_differences

        differences = model_config_differences(init_model, config.model)
        if differences:
            raise RunRefusedError(
                f"init_from {config.train.init_from}: its model is not the one the config "
                f"describes ({'; '.join(differences)}). Give the preset and model flags of the "
                "run that trained it.")
    if stored is not None:
        changed = [name for name in config_differences(stored, config)
                   if name not in RESUMABLE_CHANGES]
        if changed:
            details = ", ".join(f"{name}: {_field(stored, name)!r} -> {_field(config, name)!r}"
                                for name in changed)
            raise RunRefusedError(
                f"{workdir} holds a run with another config ({details}). Resume it with the "
                f"same settings, or start the new run in another workdir."
            )
    return config, corpus


def check_workdir_holds(workdir, wanted, kinds=("psmm", "lstm")):
    """Refuses a workdir that holds another kind of run than psmm-train's mode starts there,
    before anything is written: a mode would otherwise start a new run beside (or inside) the
    one there.

    Args:
        workdir: str or path (it may not exist yet).
        wanted: "run" (a language model's run, `train_lib.run`),
            "comparison" (`--compare_baseline`'s folder of runs, `<workdir>/<kind>/`) or
            "char_output" (a character-output run, `--char_output_on`).
        kinds: the model kinds of a comparison's runs (its `<workdir>/<kind>/` folders), for
            the message of a "comparison" refused.

    Raises:
        RunRefusedError: naming the folder, what it holds and the command that resumes it.
    """
    workdir = Path(workdir)
    char_config = workdir / run_files.CHAR_OUTPUT_CONFIG_FILE
    if wanted != "char_output" and os.path.lexists(char_config):
        if wanted == "run":
            what = ("a language model's run: without --char_output_on, psmm-train would start "
                    "one over its files")
        else:
            what = "a --compare_baseline comparison: --compare_baseline would start its runs in it"
        raise RunRefusedError(
            f"{workdir} holds a character-output run ({char_config}), not {what}. Resume it "
            f"with psmm-train --char_output_on={_char_output_base(char_config)} --workdir="
            f"{workdir} (its base run, as {run_files.CHAR_OUTPUT_CONFIG_FILE} records, and the "
            f"flags it was started with), or give another --workdir.")
    if wanted == "comparison":
        entries = run_files.run_entries(workdir)
        if entries:
            runs = ", ".join(str(workdir / kind) for kind in kinds)
            raise RunRefusedError(
                f"{workdir} holds a training run ({', '.join(entries)}), not a "
                f"--compare_baseline comparison: --compare_baseline would start its runs "
                f"inside it ({runs}). Resume the run with psmm-train --workdir={workdir} "
                f"without --compare_baseline, or give --compare_baseline another --workdir.")
    elif not os.path.lexists(workdir / run_files.CONFIG_FILE):
        runs = _comparison_runs(workdir)
        if runs:
            mode = ("without --compare_baseline, psmm-train would start a new run beside them"
                    if wanted == "run" else "a character-output run needs a folder of its own")
            raise RunRefusedError(
                f"{workdir} holds a --compare_baseline comparison ({', '.join(map(str, runs))}: "
                f"a run each), not a run of its own: {mode}. Resume the comparison with "
                f"psmm-train --compare_baseline --workdir={workdir}, or one of its runs with "
                f"--workdir={runs[0]}; or give another --workdir.")


def _comparison_runs(workdir):
    """The runs of a `psmm-train --compare_baseline` folder: its `<kind>/` subfolders (a model
    kind each, e.g. `psmm/` and `lstm/`) that hold a run's config.json, as paths, the baseline
    last ([] for any other folder)."""
    kinds = sorted(model_kinds(), key=lambda kind: kind == BASELINE_KIND)
    return [workdir / kind for kind in kinds if (workdir / kind / run_files.CONFIG_FILE).is_file()]


def _char_output_base(path):
    """The base run a character-output run's char_output.json records ("<its base run>" when
    it cannot be read)."""
    try:
        base = json.loads(Path(path).read_text(encoding="utf-8"))["base_workdir"]
    except (OSError, ValueError, TypeError, KeyError):
        return "<its base run>"
    return base if isinstance(base, str) and base else "<its base run>"


def _check_vocabulary_has_its_run(workdir):
    """Refuses a vocab.txt or vocab.sha256 in a workdir without a run to go with them (no
    config.json, no checkpoint): a run writes them with its config.json (`write_run_files`),
    so they are a user's or another run's, which a new run would take instead of the corpus's
    vocabulary. A run whose config.json was lost resumes from its checkpoints with its own."""
    workdir = Path(workdir)
    stray = [workdir / name for name in (run_files.VOCAB_FILE, run_files.VOCAB_HASH_FILE)
             if os.path.lexists(workdir / name)]
    if (not stray or os.path.lexists(workdir / run_files.CONFIG_FILE)
            or checkpoint_paths(workdir / run_files.CHECKPOINT_DIR)):
        return
    vocab_path = workdir / run_files.VOCAB_FILE
    if os.path.lexists(vocab_path):
        effect = ("a new run would take its words instead of building its vocabulary from the "
                  "corpus (--min_count, --max_vocab_size)")
    else:
        effect = (f"a new run would keep it as its vocabulary's hash, which would not match its "
                  f"{run_files.VOCAB_FILE}")
    them = "them" if len(stray) > 1 else "it"
    raise RunRefusedError(
        f"{' and '.join(map(str, stray))}: {workdir} holds no run for {them} (no "
        f"{run_files.CONFIG_FILE}, no checkpoint; a run writes its {run_files.VOCAB_FILE} with "
        f"its {run_files.CONFIG_FILE}), and {effect}. Move {them} out of {workdir}, or give "
        f"another --workdir.")


def check_resumable(workdir, restart=False):
    """Refuses a workdir whose run cannot be resumed, before anything is written there.

    Args:
        workdir: str or path. The run's folder (it may not exist yet).
        restart: bool. The caller moves the run's training outputs aside first
            (`workdir.move_training_outputs`): a run without checkpoints is then allowed.

    Raises:
        RunRefusedError: one of the run's entries is of the wrong kind (e.g. a file
            `checkpoints`), naming it; or (without `restart`) the workdir holds a trained run
            (history.json, model.keras or results.json) but no checkpoint, or a history.json or
            steps.jsonl that a resume could not append to.
    """
    workdir = Path(workdir)
    checkpoints = workdir / run_files.CHECKPOINT_DIR
    wrong = run_files.misplaced_entries(workdir)
    if wrong:
        hint = (" (a run without checkpoints starts again only with --restart)"
                if run_files.CHECKPOINT_DIR in wrong else "")
        raise RunRefusedError("; ".join(wrong.values()) + f". Move it away{hint}.")
    # A finished epoch leaves history.json, model.keras or results.json, and a checkpoint
    # beside them; steps.jsonl alone is a run killed before its first checkpoint, whose steps
    # a new start repeats exactly.
    trained = [name for name in (run_files.HISTORY_FILE, run_files.MODEL_FILE,
                                 run_files.RESULTS_FILE) if os.path.lexists(workdir / name)]
    if not restart:
        _check_run_logs(workdir)
    if trained and not restart and not checkpoint_paths(checkpoints):
        raise RunRefusedError(
            f"{workdir} holds a trained run ({', '.join(trained)}) but no checkpoint to resume "
            f"it from ({checkpoints} is missing or empty). Training again would replace its "
            f"results: pass --restart to start the run again from scratch (its files are "
            f"moved into {workdir / (run_files.PREVIOUS_RUN_PREFIX + 'N')}/), or use another "
            f"--workdir.")


def _check_run_logs(workdir):
    """Refuses a run whose history.json or steps.jsonl a resume could not append to, or whose
    initial_pointer.npz its end could not read: checked before training, not after an epoch (a
    cut history.json failed at the epoch's end)."""
    read_epoch_history(workdir)
    try:  # read at the run's end, for the pointer diagnostics: checked before an epoch is spent
        pointer_diagnostics.load_initial_pointer_weights(
            workdir / run_files.INITIAL_POINTER_FILE)
    except ValueError as err:
        raise RunRefusedError(str(err)) from None
    steps = workdir / run_files.STEPS_FILE
    if steps.is_file():
        lines = steps.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except ValueError:
                if number == len(lines):
                    continue  # the last line, cut by a kill: dropped on resume
                record = None
            if not (isinstance(record, dict) and all(
                    isinstance(record.get(key), int) and not isinstance(record.get(key), bool)
                    for key in ("epoch", "step", "global_step"))):
                raise RunRefusedError(
                    f"{steps}: line {number} is not a training step's record (epoch, step and "
                    f"global_step integers): {line[:120]!r}. Restore the file, or start the run "
                    f"again with --restart.")


_RESTART = "start the run again with --restart (its files are moved aside)"


def read_epoch_history(workdir, remedy=_RESTART):
    """The records of `<workdir>/history.json` ([] when absent). Raises `RunRefusedError`
    (with `remedy` as the advice) when it is not a JSON list of records with an int `epoch`."""
    path = Path(workdir) / run_files.HISTORY_FILE
    try:
        records = run_files.read_history(workdir)
        if not isinstance(records, list) or not all(
                isinstance(r, dict) and isinstance(r.get("epoch"), int) for r in records):
            raise ValueError("expected a JSON list of epoch records")
    except (ValueError, UnicodeDecodeError) as err:
        raise RunRefusedError(f"{path} is not the run's epoch history ({type(err).__name__}: "
                              f"{err}); restore it, or {remedy}.") from None
    return records


def finished_history(workdir, epochs_done, checkpoint, first_epoch=0, remedy=_RESTART):
    """The `history.json` records of the `epochs_done` epochs (numbered from `first_epoch`)
    that `checkpoint` (its path, for the message) finished. Raises `RunRefusedError` (with
    `remedy` as the advice) when the file is not a history or lacks one of them (an edited or
    replaced file): the resumed run would report a history without it."""
    history = read_epoch_history(workdir, remedy)
    done = range(first_epoch, first_epoch + epochs_done)
    missing = sorted(set(done) - {record["epoch"] for record in history})
    if missing:
        raise RunRefusedError(
            f"{Path(workdir) / run_files.HISTORY_FILE} lacks the record of epoch(s) {missing}, "
            f"which {checkpoint} has finished; restore the file, or {remedy}.")
    return [record for record in history if record["epoch"] in done]


def warn_epochs_change(workdir, config, schedule):
    """Says (a warning line) that a changed `train.max_epochs` (--epochs) cannot take effect on
    a run that the paper's rule already stopped (`patience` epochs without a new best
    validation perplexity; `schedule` restored from its checkpoint): no epoch runs after that
    rule stops a run, whatever its max_epochs; its results are made again. Not a refusal: a
    `--compare_baseline` resumed with more epochs trains on the half the rule has not stopped.
    Returns the message, or None where there is nothing to say."""
    patience, bad_epochs = schedule.patience, int(schedule.bad_epochs.numpy())
    config_path = Path(workdir) / run_files.CONFIG_FILE
    if bad_epochs < patience or not config_path.is_file():
        return
    recorded = ExperimentConfig.from_json(config_path.read_text(encoding="utf-8"))
    wanted = config.train.max_epochs
    if wanted == recorded.train.max_epochs:
        return
    done = int(schedule.epochs_done.numpy())
    message = (
        f"{workdir}'s run was stopped after epoch {done} by the paper's rule: patience={patience}"
        f" epoch(s) without a new best validation perplexity (best "
        f"{float(schedule.best_perplexity.numpy()):.2f}). --epochs={wanted} (train.max_epochs; "
        f"its {run_files.CONFIG_FILE} records {recorded.train.max_epochs}) cannot change that: "
        f"no epoch runs once the rule has stopped a run, and --patience cannot change on a "
        f"resume (it changes what the run learns): its results are made again. To train on, "
        f"start a new run "
        f"from its best model: psmm-train --init_from={workdir} --workdir=<another folder> with "
        f"the run's own flags (its learning rate and schedule start again).")
    logging.warning("%s", message)
    return message


def write_run_files(config, corpus, workdir, strategy):
    """Writes the run's `config.json`, and `vocab.txt` and `vocab.sha256` when missing (the
    chief only), once the run is validated and restored: see the module's docstring."""
    if not distribution.is_chief(strategy):
        return
    Path(workdir).mkdir(parents=True, exist_ok=True)
    run_files.write_config(workdir, config)
    run_files.write_vocabulary(workdir, corpus.vocabulary)


def _check_corpus_fits(config, corpus):
    """Raises `RunRefusedError` when the corpus cannot feed one training step or validation."""
    train, data = config.train, config.data
    num_train = len(corpus.ids["train"])
    if steps_per_epoch(num_train, train.batch_size, train.num_predicted, shuffled=True) < 1:
        needed = train.batch_size * 2 * train.num_predicted + 1
        raise RunRefusedError(
            f"The training split ({data.train_split!r} in {corpus.data_dir}) has {num_train} "
            f"tokens: too few for batch_size={train.batch_size} streams of num_predicted="
            f"{train.num_predicted} (about {needed} needed). Give a longer training file or a "
            f"smaller --batch_size / --bptt.")
    valid = corpus.ids.get("valid")
    if valid is None or len(valid) < 2:
        found = "no file" if valid is None else f"{len(valid)} token(s)"
        raise RunRefusedError(
            f"The validation split ({data.valid_split!r} in {corpus.data_dir}) has {found}; "
            f"at least 2 tokens are needed (set --valid_split to a split that exists).")
    # Degenerate corpora: a model of line ends alone, or a validation perplexity of
    # <unk> and line ends, trained and reported with exit 0.
    vocabulary = corpus.vocabulary
    specials = {i for i in (vocabulary.unk_id, vocabulary.eos_id) if i is not None}
    if len(vocabulary) <= len(specials):
        raise RunRefusedError(
            f"The vocabulary holds no word besides <unk> and <eos> (the training split "
            f"{data.train_split!r} in {corpus.data_dir}: {num_train} tokens, min_count="
            f"{data.min_count}, max_vocab_size={data.max_vocab_size}): blank lines only, or "
            f"every word rarer than min_count? Give a training file of text, or a smaller "
            f"--min_count.")
    if not np.isin(valid, list(specials), invert=True).any():
        raise RunRefusedError(
            f"The validation split ({data.valid_split!r} in {corpus.data_dir}) holds no word of "
            f"the vocabulary: its {len(valid)} tokens are all <unk> or <eos> (another corpus or "
            f"language than the training split, or blank lines?); its perplexity would measure "
            f"nothing. Give a validation file of the same text as the training file.")


@contextlib.contextmanager
def workdir_lock(workdir, enabled=True):
    """Holds `<workdir>/.lock` (the owner's pid) while the block runs: one run per workdir.

    The lock is an exclusive `flock` on the file, which the kernel releases when its process
    ends, however it ends: the lock file of a killed run (SIGKILL) is taken over, with a logged
    warning naming its pid. Creates the workdir (removed again if it is still empty at the end).

    Args:
        workdir: str or path.
        enabled: bool. False (non-chief workers, which share the chief's workdir): no lock.

    Raises:
        WorkdirLockedError: another process holds the lock.
        RunRefusedError: the workdir is a file, or it or its lock file cannot be written.
    """
    if not enabled:
        yield None
        return
    workdir = Path(workdir)
    if workdir.exists() and not workdir.is_dir():
        raise RunRefusedError(f"The workdir {workdir} is a file; expected a folder (or a path "
                              f"that does not exist yet).")
    created = not workdir.exists()
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunRefusedError(f"Cannot create the workdir {workdir}: {err.strerror}.") from None
    path = workdir / run_files.LOCK_FILE
    fd = _acquire_lock(path)
    try:
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                workdir.rmdir()  # only when nothing else was written


def _acquire_lock(path):
    """Opens, flocks and fills `path` with this process's pid; returns the descriptor."""
    while True:
        with contextlib.suppress(FileNotFoundError):  # a socket or device: refused unopened
            if not stat.S_ISREG(os.stat(path).st_mode):
                _refuse_lock_file(path)
        try:
            # Non-blocking: a FIFO put there between the stat and the open is not waited on.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644)
        except OSError as err:
            raise RunRefusedError(f"Cannot write the lock file {path} (is the workdir "
                                  f"writable?): {err.strerror}.") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            _refuse_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_lock_pid(fd)
            os.close(fd)
            raise WorkdirLockedError(
                f"The workdir {path.parent} is in use by another run (pid {holder or '?'}, lock "
                f"file {path}). Wait for it to end, or use another --workdir.") from None
        try:
            same_file = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same_file = False
        if not same_file:  # the previous holder removed the file as we opened it: again
            os.close(fd)
            continue
        previous = _read_lock_pid(fd)
        if previous:
            logging.warning("Took over the lock file %s of pid %s, which no longer runs "
                            "(killed?).", path, previous)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd


def _refuse_lock_file(path):
    raise RunRefusedError(f"The lock file {path} is not a regular file (a FIFO, device or "
                          f"socket); expected psmm-train's own lock file. Move it away; nothing "
                          f"was written.")


def _read_lock_pid(fd):
    text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    return text if text.isdigit() else None


def lock_holder(workdir):
    """The pid (a str, "?" when unreadable) of the run holding `<workdir>/.lock`, or None when
    no run holds it. Reads only: the lock file is neither created nor changed."""
    try:
        fd = os.open(Path(workdir) / run_files.LOCK_FILE, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # not a run's lock file: no run holds it
        os.close(fd)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_lock_pid(fd) or "?"
    finally:
        os.close(fd)  # releases the shared lock, if taken
    return None


def check_not_training(run_dir, advice, error=RunRefusedError, subject=None):
    """Refuses to read a run's model.keras while the run still trains (`lock_holder`: another
    process holds `<run_dir>/.lock`), as it is replaced at every improving validation. Reads
    only: the lock file is neither created nor changed.

    Raises:
        `error`: "<subject> is still training (pid, lock file) ... <advice>"; `subject`
            defaults to `run_dir`.
    """
    holder = lock_holder(run_dir)
    if holder is not None:
        raise error(
            f"{subject or run_dir} is still training (pid {holder} holds "
            f"{Path(run_dir) / run_files.LOCK_FILE}), and its {run_files.MODEL_FILE} is replaced "
            f"at every improving validation. {advice}")


def _init_model_file(path):
    """The .keras file `train.init_from` names (a run folder's model.keras, or the file)."""
    path = Path(path)
    model_file = path / run_files.MODEL_FILE if path.is_dir() else path
    if model_file.suffix != ".keras" or not model_file.is_file():
        raise RunRefusedError(f"init_from {path}: expected a psmm-train run folder holding "
                              f"{run_files.MODEL_FILE}, or a .keras file; there is none.")
    check_not_training(
        model_file.parent, f"Wait for it to end, or start from a copy of a "
        f"{run_files.MODEL_FILE} of it kept elsewhere.",
        subject=f"init_from {path}: the run in {model_file.parent}")
    return model_file


def init_model_sha256(path):
    """sha256 (hex) of the .keras file `train.init_from` = `path` names."""
    digest = hashlib.sha256()
    with open(_init_model_file(path), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_init_model(path):
    """The trained model `train.init_from` names: a run folder's model.keras or a .keras file.

    Raises:
        RunRefusedError: no such model, one that does not load, or one without a vocabulary,
            or the run folder holding it is still training (its lock is held).
    """
    path = Path(path)
    model_file = _init_model_file(path)
    model = run_files.read_model_file(model_file, RunRefusedError,
                                      advice=f" It is the model init_from={path} names.")
    preprocessor = getattr(model, "preprocessor", None)
    if preprocessor is None or preprocessor.vocabulary is None:
        raise RunRefusedError(f"init_from {path}: {model_file} holds no vocabulary (a model "
                              "saved by psmm-train or with a LanguageModelPreprocessor has one).")
    return model


def _base_vocabulary(config):
    """The vocabulary of the run whose model an input-to-output gate run wraps (else None)."""
    if config.model.base_model is None:
        return None
    base_run = Path(config.model.base_model).parent
    path = base_run / run_files.VOCAB_FILE
    if not path.is_file():
        raise RunRefusedError(
            f"No {path}: an input-to-output gate run reads the vocabulary of the run that "
            f"trained its base model {config.model.base_model} (model.base_model); expected "
            f"that run's folder with its {run_files.VOCAB_FILE}.")
    return run_files.load_vocabulary(base_run, error=RunRefusedError)


def _field(config, dotted):
    part, name = dotted.split(".")
    return getattr(getattr(config, part), name, None)  # None: a hyperparameter of another kind
