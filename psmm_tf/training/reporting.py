"""Progress of a run: a per-epoch progress bar, TensorBoard scalars and JSON logs.

TensorBoard gets the Keras / Model Garden layout: two runs, `tensorboard/train/` and
`tensorboard/validation/`, with the same tag names (`perplexity`, `loss`, `mean_gate`), so
TensorBoard draws train and validation on one chart, and the global step (training steps done)
on the x axis of every tag. See `TENSORBOARD_TAGS`.

Only the chief worker reports; other workers get a `Reporter(enabled=False)` that does nothing.
"""

import json
import math
import time
from pathlib import Path

import keras
import tensorflow as tf
from absl import logging
from tensorflow.core.framework import summary_pb2

from psmm_tf import workdir as run_files

_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
    data_class=summary_pb2.DATA_CLASS_SCALAR,
)

# The TensorBoard runs (folders under `tensorboard/`) and the tags each holds, all at the global
# step. `train` is written at the end of each epoch and, mid-epoch, at each checkpoint (the
# epoch's running values so far); `validation` at the end of each epoch.
#   perplexity          exp(loss)
#   loss                the mixture's mean negative log-likelihood per target token, nats
#   mean_gate           the sentinel gate g averaged over the targets (1 without a pointer)
#   learning_rate       the epoch's learning rate
#   pointer_loss_share  the pointer loss's share of the training objective
#   tokens_per_second   training throughput over the epoch so far
TRAIN_RUN = "train"
VALIDATION_RUN = "validation"
TENSORBOARD_TAGS = {
    TRAIN_RUN: ("perplexity", "loss", "mean_gate", "learning_rate", "pointer_loss_share",
                "tokens_per_second"),
    VALIDATION_RUN: ("perplexity", "loss", "mean_gate"),
}


def step_loss(metrics):
    """A step's training loss per target: its summed `loss` over its `weight` (targets)."""
    return float(metrics["loss"]) / max(float(metrics["weight"]), 1.0)


class EpochMeter:
    """Running sums of one epoch's step metrics (see `TrainStep`), its training seconds and
    token rate.

    Args:
        seconds_before: float. The epoch's training seconds before this meter (a resumed
            epoch's up to its checkpoint), so its seconds and token rate are an unbroken
            epoch's.
    """

    def __init__(self, seconds_before=0.0):
        self.sums = {"loss": 0.0, "nll": 0.0, "pointer_loss": 0.0, "gate": 0.0, "weight": 0.0}
        self.seconds_before = float(seconds_before)
        self.start = time.perf_counter()
        self.steps = 0

    def add(self, metrics):
        for key in self.sums:
            self.sums[key] += float(metrics[key])
        self.steps += 1

    def summary(self):
        """Perplexity of the mixture, mean gate, pointer-loss share, training seconds and
        tokens/s of the epoch so far."""
        weight = max(self.sums["weight"], 1.0)
        elapsed = max(self.seconds_before + time.perf_counter() - self.start, 1e-9)
        loss = self.sums["loss"]
        return {
            "perplexity": math.exp(min(self.sums["nll"] / weight, 700.0)),
            "nll": self.sums["nll"] / weight,
            "mean_gate": self.sums["gate"] / weight,
            "pointer_loss_share": self.sums["pointer_loss"] / loss if loss else 0.0,
            "tokens_per_second": self.sums["weight"] / elapsed,
            "seconds": elapsed,
        }


class Reporter:
    """Writes the progress bar, `tensorboard/{train,validation}/`, `steps.jsonl` and
    `history.json` of a run.

    Args:
        workdir: str or path. The run's directory.
        enabled: bool. False on non-chief workers: nothing is shown or written.
        verbose: int. 1 shows a Keras progress bar per epoch, 0 only log lines.
    """

    def __init__(self, workdir, enabled=True, verbose=1):
        self.workdir = Path(workdir)
        self.enabled = enabled
        self.verbose = verbose
        self._bar = None
        # Opened at their first write, not here: a start refused after the Reporter exists
        # (e.g. by a check of the restored checkpoint) leaves the run's files as they were.
        self._writers = {}
        self._steps_file = None

    def _steps(self):
        """`steps.jsonl`, opened for appending at the first record."""
        if self._steps_file is None:
            path = self.workdir / run_files.STEPS_FILE
            # A kill may have cut the last line: start the next record on a line of its own.
            cut = path.is_file() and path.stat().st_size and not path.read_bytes().endswith(b"\n")
            self._steps_file = open(path, "a")
            if cut:
                self._steps_file.write("\n")
        return self._steps_file

    def _writer(self, run):
        """The TensorBoard writer of `run`, created at its first scalar."""
        if run not in self._writers:
            self._writers[run] = tf.summary.create_file_writer(
                str(self.workdir / run_files.TENSORBOARD_DIR / run))
        return self._writers[run]

    def drop_steps_after(self, global_step):
        """Removes the `steps.jsonl` records of steps after `global_step` (the restored
        checkpoint's; 0 for a new run), and any line cut by a kill: a resumed run logs those
        steps again, so each appears once."""
        path = self.workdir / run_files.STEPS_FILE
        if not self.enabled or not path.is_file():
            return
        if self._steps_file is not None:
            self._steps_file.close()
            self._steps_file = None
        kept = []
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("global_step", 0) <= global_step:
                kept.append(line + "\n")
        run_files.write_text_atomic(path, "".join(kept))

    def start_epoch(self, epoch, num_steps, first_step):
        if self.enabled and self.verbose:
            print(f"Epoch {epoch + 1}", flush=True)
            self._bar = keras.utils.Progbar(
                num_steps, stateful_metrics=["ppl", "tok/s", "lr", "gate"])
            if first_step:
                self._bar.update(first_step)

    def step(self, epoch, step, global_step, metrics, meter, learning_rate):
        """Logs one finished step (`step` is its 0-based index within the epoch)."""
        if not self.enabled:
            return
        loss = step_loss(metrics)
        record = {"epoch": epoch, "step": step, "global_step": global_step, "loss": loss,
                  "grad_norm": float(metrics["grad_norm"]), "learning_rate": learning_rate}
        steps = self._steps()
        steps.write(json.dumps(record) + "\n")
        steps.flush()
        if self._bar is not None:
            summary = meter.summary()
            self._bar.update(step + 1, values=[
                ("ppl", summary["perplexity"]), ("tok/s", summary["tokens_per_second"]),
                ("gate", summary["mean_gate"]), ("lr", learning_rate)])

    def train_scalars(self, global_step, meter, learning_rate):
        """Writes the `train` run's tags (`TENSORBOARD_TAGS`) from an `EpochMeter` at the
        global step: the epoch's values so far (mid-epoch) or the whole epoch's (at its end)."""
        summary = meter.summary()
        self._scalars(TRAIN_RUN, global_step, {
            "perplexity": summary["perplexity"], "loss": summary["nll"],
            "mean_gate": summary["mean_gate"], "learning_rate": learning_rate,
            "pointer_loss_share": summary["pointer_loss_share"],
            "tokens_per_second": summary["tokens_per_second"]})

    def validation_scalars(self, global_step, perplexity, mean_gate=1.0):
        """Writes the `validation` run's tags at the global step (loss: log perplexity)."""
        self._scalars(VALIDATION_RUN, global_step, {
            "perplexity": perplexity, "loss": math.log(perplexity), "mean_gate": mean_gate})

    def _scalars(self, run, step, values):
        """Writes `values` (tag -> number) as TensorBoard scalars of `run` at `step`."""
        if not self.enabled:
            return
        writer = self._writer(run)
        with writer.as_default(step=step):
            for name, value in values.items():
                # tf.summary.scalar needs the tensorboard package; the low-level write with
                # the scalars plugin's metadata gives the same event without it.
                tf.summary.write(name, tf.constant(float(value), tf.float32),
                                 metadata=_SCALAR_METADATA)
        writer.flush()

    def end_epoch(self, record, line=None):
        """Appends one epoch's record to `history.json` (replacing one of the same `epoch`, an
        epoch a resumed run repeats) and logs `line` (default: a language model's epoch)."""
        if not self.enabled:
            return
        self._bar = None
        history = run_files.read_history(self.workdir)
        history = [r for r in history if r["epoch"] != record["epoch"]] + [record]
        run_files.write_json_atomic(self.workdir / run_files.HISTORY_FILE, history)
        if line is None:
            line = (f"epoch {record['epoch'] + 1}: train ppl {record['train_perplexity']:.2f}, "
                    f"valid ppl {record['valid_perplexity']:.2f}, lr "
                    f"{record['learning_rate']:.4g}, {record['tokens_per_second']:.0f} "
                    f"tokens/s{' (best)' if record['improved'] else ''}")
        logging.info("%s", line)

    def close(self):
        if self._steps_file is not None:
            self._steps_file.close()
            self._steps_file = None
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


# History readers live in `psmm_tf.workdir`; callers of these names still find them.
read_history = run_files.read_history
read_step_losses = run_files.read_step_losses
write_json_atomic = run_files.write_json_atomic
