r"""Training-step throughput: PSMM against the LSTM baseline on the same backbone.

Measures full training steps (forward, loss, gradients, global-norm clipping, SGD update) on
random token windows, every variant in one process and interleaved round by round (A B C A B C
...) so that load from elsewhere on a shared machine hits all of them alike. Prints tokens/s of
predicted tokens per variant and the ratio of step times against the LSTM of the same size and
compilation mode.

Variants per preset and jit mode:
  lstm                  the softmax LSTM, T-token windows
  psmm_cache            PSMM, T-token windows, memory of the last L - 1 states carried
  psmm_recompute_C=L    PSMM, windows of L context + T predicted tokens

Large vocabularies (--large_vocab): the `small` PSMM at V = 267,735 (WikiText-103) with the
full softmax, the importance-sampled softmax and the CNN softmax; step times interleaved in this
process, peak resident memory from a child process per softmax (RSS cannot be attributed inside
one process).

Usage:
  python benchmarks/throughput.py --presets=small,medium --jit=off,on --rounds=6
  python benchmarks/throughput.py --large_vocab --presets=small --jit=off --rounds=4
"""

import json
import resource
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from psmm_tf import configs
from psmm_tf.losses import PointerSentinelLoss
from psmm_tf.models import build_model

FLAGS = flags.FLAGS
flags.DEFINE_list("presets", ["small", "medium"], "Model presets to measure.")
flags.DEFINE_list("jit", ["off", "on"], "XLA modes to measure: off, on.")
flags.DEFINE_integer("rounds", 6, "Timed steps per variant (after one warm-up step).")
flags.DEFINE_integer("vocab_size", 10000, "Vocabulary size (PTB: 10,000).")
flags.DEFINE_list("variants", ["lstm", "psmm_cache", "psmm_recompute"], "Variants to measure.")
flags.DEFINE_bool("large_vocab", False, "Measure full vs sampled vs CNN softmax at V=267,735.")
flags.DEFINE_integer("large_vocab_size", 267_735, "Vocabulary of the large-vocabulary rows.")
flags.DEFINE_integer("num_sampled", 1024, "Samples per step of the sampled and CNN softmaxes.")
flags.DEFINE_string("child_softmax", None, "Internal: run one softmax and print its peak RSS.")

SOFTMAX_VARIANTS = ("full", "sampled", "cnn")


class Variant:
    """One model, its compiled training step, and a fixed batch."""

    def __init__(self, name, preset, jit_compile, vocab_size, softmax="full", num_sampled=1024):
        config = configs.get_preset(preset)
        kind = "lstm" if name == "lstm" else "psmm"
        model_config = configs.dataclasses.replace(config.model, kind=kind, softmax=softmax,
                                                   num_sampled=num_sampled,
                                                   vocab_size=vocab_size, seed=0)
        self.name = name
        self.model = build_model(model_config)
        self.model.set_vocabulary([f"word{i}" for i in range(vocab_size)])
        self.num_predicted = config.train.num_predicted
        self.batch_size = config.train.batch_size
        self.context = model_config.window_size if name == "psmm_recompute" else 0
        self.optimizer = tf.keras.optimizers.SGD(learning_rate=config.train.learning_rate)
        self.clip_norm = config.train.clip_norm
        self.loss_fn = PointerSentinelLoss() if kind == "psmm" else None
        rng = np.random.default_rng(0)
        window = self.context + self.num_predicted
        self.inputs = tf.constant(rng.integers(0, vocab_size, (self.batch_size, window)),
                                  tf.int32)
        self.targets = tf.constant(
            rng.integers(0, vocab_size, (self.batch_size, self.num_predicted)), tf.int32)
        self.state = self.model.zero_state(self.batch_size)
        self.memory = self.model.empty_memory(self.batch_size) if self.context == 0 else None
        self.step = tf.function(self._step, jit_compile=jit_compile)

    def _loss(self, outputs):
        if self.loss_fn is not None:
            return self.loss_fn(self.targets, outputs)
        return -tf.reduce_mean(self.model.log_prob(outputs, self.targets))

    def _step(self, inputs, state, memory):
        with tf.GradientTape() as tape:
            outputs = self.model(inputs, state=state, memory=memory, targets=self.targets,
                                 context_length=self.context, training=True)
            loss = self._loss(outputs)
        grads = tape.gradient(loss, self.model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, self.clip_norm)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss, outputs["state"], outputs["memory"] if memory is not None else memory

    def run_step(self):
        """One training step, carrying state and memory; returns its wall time in seconds."""
        start = time.perf_counter()
        loss, self.state, memory = self.step(self.inputs, self.state, self.memory)
        if self.memory is not None:
            self.memory = memory
        float(loss)  # wait for the step to finish
        return time.perf_counter() - start

    @property
    def tokens_per_step(self):
        return self.batch_size * self.num_predicted


def measure(preset, jit, rounds, vocab_size, variant_names):
    """Interleaved step times of every variant: {name: [seconds, ...]}."""
    variants = [Variant(name, preset, jit == "on", vocab_size) for name in variant_names]
    for variant in variants:
        variant.run_step()  # trace and compile
    times = {variant.name: [] for variant in variants}
    for _ in range(rounds):
        for variant in variants:
            times[variant.name].append(variant.run_step())
    return variants, times


def measure_large_vocabulary(preset, jit, rounds, vocab_size, num_sampled):
    """Interleaved step times of the three softmaxes of PSMM at a large vocabulary."""
    variants = [Variant(softmax, preset, jit == "on", vocab_size, softmax, num_sampled)
                for softmax in SOFTMAX_VARIANTS]
    variants[0].name = "psmm_cache"  # Variant picks the model kind from the name
    for variant in variants:
        variant.run_step()
    times = {softmax: [] for softmax in SOFTMAX_VARIANTS}
    for _ in range(rounds):
        for softmax, variant in zip(SOFTMAX_VARIANTS, variants):
            times[softmax].append(variant.run_step())
    return variants, times


def peak_memory_mib(softmax):
    """Peak RSS (MiB) of a child process that builds the model and runs three steps."""
    command = [sys.executable, __file__, f"--child_softmax={softmax}",
               f"--presets={FLAGS.presets[0]}", f"--jit={FLAGS.jit[0]}",
               f"--large_vocab_size={FLAGS.large_vocab_size}",
               f"--num_sampled={FLAGS.num_sampled}"]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])["peak_rss_mib"]


def run_child(softmax):
    variant = Variant("psmm_cache", FLAGS.presets[0], FLAGS.jit[0] == "on",
                      FLAGS.large_vocab_size, softmax, FLAGS.num_sampled)
    for _ in range(3):
        variant.run_step()
    print(json.dumps({"softmax": softmax, "peak_rss_mib": peak_rss_mib()}))


def peak_rss_mib():
    """This process's peak resident memory. VmHWM belongs to the address space made at exec;
    ru_maxrss would carry over the forking parent's peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main_large_vocabulary():
    preset, jit = FLAGS.presets[0], FLAGS.jit[0]
    print(f"PSMM {preset}, jit {jit}, V = {FLAGS.large_vocab_size:,}, "
          f"{FLAGS.num_sampled} samples per step")
    variants, times = measure_large_vocabulary(preset, jit, FLAGS.rounds,
                                               FLAGS.large_vocab_size, FLAGS.num_sampled)
    base = float(np.median(times["full"]))
    print(f"{'softmax':8} {'step ms':>9} {'tokens/s':>10} {'vs full':>8} {'peak RSS MiB':>13}")
    for softmax, variant in zip(SOFTMAX_VARIANTS, variants):
        median = float(np.median(times[softmax]))
        print(f"{softmax:8} {1000 * median:9.1f} {variant.tokens_per_step / median:10.0f} "
              f"{median / base:8.3f} {peak_memory_mib(softmax):13.0f}", flush=True)


def main(argv):
    del argv
    if FLAGS.child_softmax:
        run_child(FLAGS.child_softmax)
        return
    if FLAGS.large_vocab:
        main_large_vocabulary()
        return
    print(f"tensorflow {tf.__version__}, devices: "
          f"{[d.device_type for d in tf.config.list_physical_devices()]}")
    header = f"{'preset':8} {'jit':4} {'variant':16} {'step ms':>9} {'tokens/s':>10} {'vs lstm':>8}"
    print(header)
    for preset in FLAGS.presets:
        for jit in FLAGS.jit:
            variants, times = measure(preset, jit, FLAGS.rounds, FLAGS.vocab_size,
                                      FLAGS.variants)
            base = np.median(times["lstm"]) if "lstm" in times else None
            for variant in variants:
                median = float(np.median(times[variant.name]))
                ratio = f"{median / base:8.3f}" if base else "       -"
                print(f"{preset:8} {jit:4} {variant.name:16} {1000 * median:9.1f} "
                      f"{variant.tokens_per_step / median:10.0f} {ratio}", flush=True)
            tf.keras.backend.clear_session()


if __name__ == "__main__":
    app.run(main)
