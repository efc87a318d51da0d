"""Training a language model end to end: `run(config, workdir)` (docs/architecture.md).

Each epoch reads the training split as B contiguous streams in windows of C + T tokens and
carries the LSTM state (and, with `pointer_memory="cache"`, the pointer memory) from window to
window; both are reset at the start of every epoch. After each epoch the exact validation
perplexity drives the schedule (`PlateauSchedule`: the paper's section 5.2, the learning rate
halved when worse than the previous epoch, or Zaremba et al.'s decay by epoch from
`lr_decay_from_epoch`; stop after `patience` epochs without improvement or at `max_epochs`), and the
best model is saved as `workdir/model.keras`. Checkpoints every `checkpoint_every_steps` steps
and at every epoch end let a killed run resume with the same losses as an uninterrupted one.
"""

import math
import os
import shutil
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from psmm_tf import checkpoints, native
from psmm_tf import workdir as run_files
from psmm_tf.data.pipeline import training_windows
from psmm_tf.data.windows import steps_per_epoch
from psmm_tf.evaluation import gate_calibration, pointer_diagnostics
from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.gradients import warmup_factor
from psmm_tf.models import LanguageModelPreprocessor, build_model
from psmm_tf.optimizers import make_optimizer
from psmm_tf.training import (
    checkpointing,
    distribution,
    reporting,
    run_setup,
)
from psmm_tf.training.schedule import PlateauSchedule
from psmm_tf.training.steps import TrainStep


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; the run stopped without saving."""


class _Run:
    """The objects of one training run and its epoch loop."""

    def __init__(self, config, corpus, workdir, strategy, verbose):
        self.config, self.corpus, self.workdir, self.strategy = config, corpus, workdir, strategy
        self.chief = distribution.is_chief(strategy)
        train = config.train
        keras.utils.set_random_seed(train.seed)
        self.jit_compile = run_setup.resolve_jit_compile(train.jit_compile)
        with strategy.scope():
            # The vocabulary travels in model.keras: `model.score_text` works after loading.
            self.model = build_model(
                config.model, preprocessor=LanguageModelPreprocessor(corpus.vocabulary),
                dtype=train.mixed_precision)
            self.model.set_vocabulary(corpus.vocabulary.tokens)
            if train.init_from is not None:  # fine-tuning (a checkpoint, if any, comes later)
                self.model.set_weights(run_setup.load_init_model(train.init_from).get_weights())
            self.optimizer = make_optimizer(train)
            self.optimizer.build(self.model.trainable_variables)
        self.schedule = PlateauSchedule(train.learning_rate, train.lr_decay, train.patience,
                                        train.max_epochs,
                                        decay_from_epoch=train.lr_decay_from_epoch)
        self.context_length = train.resolved_context_length(config.model.window_size)
        self.train_step = TrainStep(
            self.model, self.optimizer, strategy, train.batch_size, self.context_length,
            use_memory=train.pointer_memory == "cache", clip_norm=train.clip_norm,
            jit_compile=self.jit_compile, pointer_clip_norm=train.pointer_clip_norm,
            pointer_weight=train.pointer_loss_weight,
            char_cnn_clip_norm=train.char_cnn_clip_norm)
        self.progress = checkpointing.Progress()
        self.epoch_seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                         name="epoch_seconds")
        self.carry = checkpointing.Carry(*self.train_step.zero_carry())
        self.checkpoint = checkpointing.make_checkpoint(
            self.model, self.optimizer, self.schedule, self.progress, self.carry,
            vocabulary_sha256=corpus.vocabulary.sha256(), epoch_seconds=self.epoch_seconds)
        directory = workdir / run_files.CHECKPOINT_DIR
        if not self.chief:  # every worker saves (collectives); only the chief's files stay
            directory = (run_files.worker_dir(workdir, distribution.worker_name(strategy))
                         / run_files.CHECKPOINT_DIR)
        self.manager = checkpointing.make_manager(self.checkpoint, str(directory),
                                                  train.keep_checkpoints)
        self.evaluator = self.new_evaluator(self.model)
        self.reporter = reporting.Reporter(workdir, enabled=self.chief, verbose=verbose)
        logging.info("%s: %d replica(s), XLA %s, C=%d T=%d B=%d, %d steps per epoch.",
                     config.model.kind, strategy.num_replicas_in_sync,
                     "on" if self.jit_compile else "off", self.context_length,
                     train.num_predicted, train.batch_size, self.num_steps())

    @classmethod
    def start(cls, config, workdir, strategy, verbose, restart):
        """The one place that builds a run: validated against the data and the workdir, its
        objects built and its checkpoint restored; only then are its files written (a new run's
        pointer as initialised too, for psmm-evaluate's diagnostics)."""
        config, corpus = run_setup.prepare_workdir(config, workdir, strategy, restart=restart)
        if restart and distribution.is_chief(strategy):
            run_files.move_training_outputs(workdir)
        run = cls(config, corpus, workdir, strategy, verbose)
        try:
            resumed = run.restore()
            run_setup.write_run_files(config, corpus, workdir, strategy)
            if (not resumed and run.chief
                    and pointer_diagnostics.has_sentinel_pointer(run.model)):
                pointer_diagnostics.save_initial_pointer_weights(
                    run.model, workdir / run_files.INITIAL_POINTER_FILE)
            run.reporter.drop_steps_after(run.progress.get()[2])
        except BaseException:
            run.reporter.close()
            raise
        return run

    def restore(self):
        """Restores the latest checkpoint of the chief's directory, if any; whether one was."""
        # Every object but the vocabulary's hash, which 0.1.0's checkpoints lack, and the
        # epoch's seconds, which 0.2.0's lack: each is read on its own.
        path = checkpointing.restore_latest(
            checkpointing.make_checkpoint(self.model, self.optimizer, self.schedule,
                                          self.progress, self.carry),
            self.workdir / run_files.CHECKPOINT_DIR)
        if path is not None:
            checkpoints.check_checkpoint_vocabulary(
                path, self.corpus.vocabulary.sha256(), run_setup.RunRefusedError)
            self.epoch_seconds.assign(checkpointing.read_epoch_seconds(path))
            run_setup.finished_history(self.workdir, int(self.schedule.epochs_done.numpy()),
                                       path)
            run_setup.warn_epochs_change(self.workdir, self.config, self.schedule)
            logging.info("Resumed %s at epoch %d, step %d.", path, *self.progress.get()[:2])
        # A resumed run may have a new max_epochs; the schedule's counters come from the file.
        self.schedule.max_epochs = self.config.train.max_epochs
        return path is not None

    def new_evaluator(self, model):
        """An `Evaluator` of `model` with the run's evaluation settings (each traces its own
        functions: a changed gate calibration needs a new one)."""
        train = self.config.train
        return Evaluator(model, train.eval_batch_size, train.eval_length,
                         jit_compile=self.jit_compile)

    def num_steps(self):
        train = self.config.train
        available = steps_per_epoch(len(self.corpus.ids["train"]), train.batch_size,
                                    train.num_predicted, shuffled=True)
        return min(available, train.steps_per_epoch or available)

    def save(self, epoch, step, global_step, state, memory, seconds):
        """Checkpoints the run at (epoch, next step) with the carried state and memory, and the
        epoch's training `seconds` so far."""
        global_state, global_memory = self.train_step.gather(state, memory)
        self.carry.assign(global_state, global_memory)
        self.progress.set(epoch, step, global_step)
        self.epoch_seconds.assign(seconds)
        self.manager.save(checkpoint_number=global_step)

    def train_epoch(self):
        """Runs the rest of the current epoch; returns its `EpochMeter`."""
        train = self.config.train
        epoch, step, global_step = self.progress.get()
        num_steps = self.num_steps()
        if step == 0:
            state, memory = self.train_step.initial_carry()
            self.progress.epoch_sums.assign(tf.zeros([5], tf.float64))
        else:
            state, memory = self.train_step.distribute(*self.carry.read())
        # A resumed epoch goes on from its checkpoint's sums and seconds (zero at step 0).
        meter = reporting.EpochMeter(seconds_before=self.epoch_seconds.numpy() if step else 0.0)
        for key, value in zip(meter.sums, self.progress.epoch_sums.numpy(), strict=True):
            meter.sums[key] = float(value)
        lr = float(self.schedule.learning_rate.numpy())
        self.optimizer.learning_rate = lr
        # Each epoch starts its windows at its own random offset in [0, T), a function of the
        # run's seed and the epoch, so a resumed epoch reads the same windows.
        dataset = training_windows(self.corpus.ids["train"], train.batch_size,
                                   self.context_length, train.num_predicted,
                                   shuffle_offset_seed=train.seed * 1_000_003 + epoch,
                                   spelling=self.corpus.spelling("train"))
        self.reporter.start_epoch(epoch, num_steps, step)
        for batch in dataset.take(num_steps).skip(step):
            step_lr = lr * warmup_factor(global_step, train.warmup_steps)
            if global_step <= train.warmup_steps:  # the rate changes during the warm-up only
                self.optimizer.learning_rate = step_lr
            metrics, state, memory = self.train_step(
                batch, state, memory,
                pointer_share=warmup_factor(global_step, train.pointer_warmup_steps))
            loss = reporting.step_loss(metrics)
            if not math.isfinite(loss):
                raise NonFiniteLossError(
                    f"Training loss is {loss} at epoch {epoch + 1}, step {step + 1} (global step "
                    f"{global_step + 1}); the run stopped without saving. Last good checkpoint: "
                    f"{self.manager.latest_checkpoint or 'none'}. Resume from it with a lower "
                    f"learning_rate or clip_norm.")
            meter.add(metrics)
            self.progress.epoch_sums.assign(np.array(list(meter.sums.values())))
            self.reporter.step(epoch, step, global_step + 1, metrics, meter, step_lr)
            step, global_step = step + 1, global_step + 1
            if global_step % train.checkpoint_every_steps == 0 and step < num_steps:
                self.save(epoch, step, global_step, state, memory, meter.summary()["seconds"])
                self.reporter.train_scalars(global_step, meter, lr)
        self.progress.set(epoch, step, global_step)
        return meter

    def end_epoch(self, meter):
        """Validates, applies the schedule, saves the best model and the epoch's checkpoint."""
        epoch, _, global_step = self.progress.get()
        valid = self.evaluator.evaluate(self.corpus.ids["valid"],
                                        max_tokens=self.config.train.max_eval_tokens,
                                        spelling=self.corpus.spelling("valid"))
        lr = float(self.schedule.learning_rate.numpy())
        decision = self.schedule.update(valid.perplexity)
        if decision.improved and self.chief:
            run_files.save_model_atomic(self.model, self.workdir / run_files.MODEL_FILE)
        summary = meter.summary()
        record = {"epoch": epoch, "global_step": global_step, "learning_rate": lr,
                  "train_perplexity": summary["perplexity"], "valid_perplexity": valid.perplexity,
                  "valid_mean_gate": valid.mean_gate, "train_mean_gate": summary["mean_gate"],
                  "pointer_loss_share": summary["pointer_loss_share"],
                  "tokens_per_second": summary["tokens_per_second"],
                  "train_seconds": summary["seconds"], "improved": decision.improved,
                  "next_learning_rate": decision.learning_rate}
        self.reporter.end_epoch(record)
        self.reporter.train_scalars(global_step, meter, lr)
        self.reporter.validation_scalars(global_step, valid.perplexity, valid.mean_gate)
        self.progress.set(epoch + 1, 0, global_step)
        self.epoch_seconds.assign(0.0)
        self.manager.save(checkpoint_number=global_step)

    def finish(self):
        """Evaluates the best model (`model.keras`) on valid and test; writes results.json."""
        if not self.chief:
            return {}
        best = run_files.read_model_file(self.workdir / run_files.MODEL_FILE)
        results = {"best_valid_perplexity": float(self.schedule.best_perplexity.numpy()),
                   "epochs": int(self.schedule.epochs_done.numpy()),
                   "global_step": self.progress.get()[2],
                   "train_seconds": sum(r["train_seconds"]
                                        for r in run_files.read_history(self.workdir))}
        max_tokens = self.config.train.max_eval_tokens
        if pointer_diagnostics.has_sentinel_pointer(best):
            results.update(self._pointer_results(
                best, self.corpus.ids["valid"][:max_tokens],
                self.corpus.spelling("valid", stop=max_tokens)))
        if "test" in self.corpus.ids:
            test = self.new_evaluator(best).evaluate(
                self.corpus.ids["test"], max_tokens=max_tokens,
                spelling=self.corpus.spelling("test"))
            results.update(test_perplexity=test.perplexity, test_mean_gate=test.mean_gate)
            calibration = (best.pointer.gate_calibration
                           if pointer_diagnostics.has_sentinel_pointer(best) else None)
            if calibration is not None:  # the paper's model too: the gate as trained
                best.set_gate_calibration(None)  # a new evaluator: the first traced the gate
                results["trained_gate_test_perplexity"] = self.new_evaluator(best).evaluate(
                    self.corpus.ids["test"], max_tokens=max_tokens,
                    spelling=self.corpus.spelling("test")).perplexity
        run_files.write_json_atomic(self.workdir / run_files.RESULTS_FILE, results)
        return results

    def _pointer_results(self, model, valid_ids, valid_spelling):
        """The trained pointer's diagnostics on the validation split and, with `calibrate_gate`,
        the gate's calibration fitted on the same pass (then set on `model` and saved)."""
        # Diagnostics and fit read the trained gate, also when model.keras is already
        # calibrated (a finished run resumed for more epochs without a better one).
        was_calibrated = model.pointer.gate_calibration is not None
        model.set_gate_calibration(None)
        records = pointer_diagnostics.collect_pointer_records(
            model, valid_ids, length=self.config.train.eval_length, spelling=valid_spelling)
        # Proof that the pointer trained (or not): see `pointer_diagnostics`.
        results = {"pointer": pointer_diagnostics.diagnostics_from_records(
            records, model, pointer_diagnostics.load_initial_pointer_weights(
                self.workdir / run_files.INITIAL_POINTER_FILE))}
        if self.config.train.calibrate_gate:
            fit = gate_calibration.calibrate_from_records(model, records)
            results.update(gate_calibration=fit,
                           calibrated_valid_perplexity=math.exp(fit["log_ppl_after"]))
        if self.config.train.calibrate_gate or was_calibrated:
            run_files.save_model_atomic(model, self.workdir / run_files.MODEL_FILE)
        return results


def run(config, workdir, strategy=None, verbose=1, finish=True, restart=False):
    """Trains the model of `config` in `workdir`, resuming the run there if one exists.

    Args:
        config: `psmm_tf.configs.ExperimentConfig`.
        workdir: str or path. See `psmm_tf.workdir` for what it holds.
        strategy: optional `tf.distribute.Strategy` (default: the current one, one device).
        verbose: int. 1: a progress bar per epoch; 0: log lines only.
        finish: bool. Evaluate the best model on the test split, take the pointer diagnostics
            and fit the gate's calibration when training ends (results.json). False stops after
            the last epoch's checkpoint and returns `{}`: a run trained epoch by epoch in turns
            with others (benchmarks/side_by_side.py) finishes once, at its last epoch.
        restart: bool. Start the workdir's run again from scratch: its training outputs
            (checkpoints, model.keras, history, steps, results, TensorBoard) are moved into
            `previous_run_<N>/` first. Without it, a workdir whose trained run has lost its
            checkpoints is refused (training again would replace its results).

    Returns:
        dict, also written to `workdir/results.json` ({} on non-chief workers):
        `best_valid_perplexity`, `test_perplexity` (with a test split; for a calibrated gate
        also `trained_gate_test_perplexity`, the gate as trained), `epochs`, `global_step`,
        `train_seconds`; for a sentinel pointer `pointer`, its diagnostics on the validation
        split (of the trained gate), and with `TrainConfig.calibrate_gate` `gate_calibration`
        (its fit there) and `calibrated_valid_perplexity` (the test perplexity is then the
        calibrated model's, the one model.keras holds).

    Raises:
        NonFiniteLossError: the loss became NaN or infinite (the last checkpoint is kept).
        run_setup.RunRefusedError (a ValueError): bad data, a workdir holding a run with
            another config or vocabulary, or in use by another run (nothing written then).
        checkpointing.CheckpointRestoreError: no checkpoint of the workdir can be read.
    """
    workdir = Path(workdir)
    # The run's native-kernel mode is the process's one switch while it trains (one run at a
    # time in a process: runs in threads of one process would share the switch).
    previous = native.configure(mode=config.train.native)
    try:
        if config.train.native == "on":  # refused before anything is written
            try:
                native.check(jit_compile=run_setup.resolve_jit_compile(config.train.jit_compile))
            except native.NativeKernelsUnavailable as err:
                raise run_setup.RunRefusedError(str(err)) from None
        strategy = strategy or tf.distribute.get_strategy()
        chief = distribution.is_chief(strategy)
        results = drive(lambda: _Run.start(config, workdir, strategy, verbose, restart),
                        workdir, chief=chief, finish=finish)
    finally:
        native.configure(mode=previous.mode)
    if not chief:
        shutil.rmtree(run_files.worker_dir(workdir, distribution.worker_name(strategy)),
                      ignore_errors=True)
    return results


def drive(start, workdir, chief=True, finish=True):
    """The engine of every run (`run`'s and `char_output_training.run`'s): holds the
    workdir's lock, starts the run (`start()`; a start that raises has written none of the
    run's files, and what it created is removed), trains epoch by epoch (`train_epoch`,
    `end_epoch`) until its `schedule.should_stop`, then returns `finish()`'s results ({}
    without `finish`). `chief`: False on workers that are not the chief (no lock).
    """
    with run_setup.workdir_lock(workdir, enabled=chief):
        before = _entries(workdir) if chief else None
        try:
            state = start()
        except BaseException:
            if chief:
                _remove_new_entries(workdir, before)
            raise
        try:
            while not state.schedule.should_stop:
                state.end_epoch(state.train_epoch())
            return state.finish() if finish else {}
        finally:
            state.reporter.close()


def _entries(workdir):
    """The names in `workdir` (none if it does not exist)."""
    return set(os.listdir(workdir)) if Path(workdir).is_dir() else set()


def _remove_new_entries(workdir, before):
    """Removes the entries a refused start created (`workdir.START_CREATES`, e.g. the
    synthetic corpus a corrected command would otherwise read) that were not there `before`:
    whatever a user put in the workdir stays."""
    for name in (_entries(workdir) - before) & run_files.START_CREATES:
        path = Path(workdir) / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def model_valid_perplexity(results):
    """The validation perplexity of the run's model.keras: with its calibrated gate, if any."""
    return results.get("calibrated_valid_perplexity", results["best_valid_perplexity"])


def format_results(results):
    """The lines psmm-train prints for `run`'s results: perplexities, pointer diagnostics."""
    lines = [f"best valid perplexity {results['best_valid_perplexity']:.2f}"
             + (f", test perplexity {results['test_perplexity']:.2f}"
                if "test_perplexity" in results else "")]
    if "gate_calibration" in results:
        lines.append(gate_calibration.format_gate_calibration(results["gate_calibration"]))
    if "pointer" in results:
        lines.append("pointer diagnostics (valid, the trained gate):")
        lines += [f"  {line}"
                  for line in pointer_diagnostics.format_pointer_diagnostics(results["pointer"])]
    return "\n".join(lines)
