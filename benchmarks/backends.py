r"""Training-step throughput on the TensorFlow and JAX Keras backends, side by side in one run.

A process has one Keras backend, so each backend runs in a child process; the parent starts
them in turn, `--repeats` times each (TF JAX TF JAX ...), so that load from elsewhere hits both
alike, and prints the medians. Inside a child the LSTM and the PSMM ("cache" memory, the
presets' default) steps are interleaved round by round (A B A B ...), so the PSMM/LSTM ratio is
measured side by side too: its column is the median over all rounds of a round's PSMM step over
the LSTM step just before it (step times of one child differ from another's on a
shared VM, so pooled medians of the two rows would mix children). The steps are the package's
own: `psmm_tf.training.steps.TrainStep` (TensorFlow, XLA off and on) and
`psmm_tf.jax_train_step.JaxTrainStep` (JAX, always XLA).

Usage:
  python benchmarks/backends.py --preset=medium --rounds=5 --repeats=2
"""

import json
import os
import subprocess
import sys

import numpy as np
import step_setup
from absl import app, flags

FLAGS = flags.FLAGS
step_setup.define_shape_flags()
flags.adopt_module_key_flags(step_setup)  # listed in --help
flags.DEFINE_integer("rounds", 5, "Timed steps per model in a child (after 2 warm-up steps).")
flags.DEFINE_integer("repeats", 2, "Children per backend, alternated.")
flags.DEFINE_list("modes", ["tensorflow", "tensorflow_xla", "jax"], "Backends (and XLA modes).")
flags.DEFINE_string("child", None, "Internal: the mode this child measures.")

KINDS = ("lstm", "psmm")


def child(mode):
    """Measures both kinds in this process; prints one JSON line of step times."""
    preset = step_setup.shaped_preset(FLAGS.preset, FLAGS.batch_size, FLAGS.bptt)
    batch = step_setup.random_batch(preset, FLAGS.vocab_size, np.random.default_rng(0))
    runners = {}
    for kind in KINDS:
        model, optimizer = step_setup.model_and_optimizer(preset, kind, FLAGS.vocab_size)
        settings = step_setup.step_settings(preset)
        if mode.startswith("tensorflow"):
            runners[kind] = step_setup.tensorflow_step(model, optimizer, batch, settings,
                                                       jit_compile=mode == "tensorflow_xla")
        else:
            runners[kind] = step_setup.jax_step(model, optimizer, batch, settings)
    times = step_setup.interleaved_times(runners, FLAGS.rounds)
    print(json.dumps({"mode": mode, "tokens_per_step": batch["targets"].size, "times": times}))


def _paired_ratios(times):
    """Each round's PSMM step time over the LSTM step run just before it."""
    return [psmm / lstm for lstm, psmm in zip(times["lstm"], times["psmm"], strict=True)]


def matmul_flops_per_token(model, train, vocab_size):
    """Forward multiply-add FLOPs per predicted token: (LSTM + softmax, pointer).

    LSTM layer l: 2 (in_l + H) 4H; softmax: 2 H V; pointer (eqs. 5-7): the query 2 H^2 and the
    scores of the K = L - 1 + T keys a window's query is multiplied with, 2 H K, plus the
    sentinel 2 H. The backward pass costs about twice each, so the shares hold for a step.
    """
    hidden, keys = model.hidden_dim, model.window_size - 1 + train.num_predicted
    lstm = sum(2 * ((model.embedding_dim if layer == 0 else hidden) + hidden) * 4 * hidden
               for layer in range(model.num_layers))
    return lstm + 2 * hidden * vocab_size, 2 * hidden * hidden + 2 * hidden * (keys + 1)


def main(argv):
    del argv
    preset = step_setup.shaped_preset(FLAGS.preset, FLAGS.batch_size, FLAGS.bptt)
    base, pointer = matmul_flops_per_token(preset.model, preset.train, FLAGS.vocab_size)
    print(f"matmul FLOPs per token: LSTM LM {base / 1e6:.2f} M, the pointer {pointer / 1e6:.2f} "
          f"M more: PSMM/LSTM {1 + pointer / base:.3f} at an equal FLOP rate", flush=True)
    if FLAGS.child:
        child(FLAGS.child)
        return
    results = {mode: {kind: [] for kind in KINDS} for mode in FLAGS.modes}
    ratios = {mode: [] for mode in FLAGS.modes}
    tokens = None
    for _ in range(FLAGS.repeats):
        for mode in FLAGS.modes:
            backend = "jax" if mode == "jax" else "tensorflow"
            env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
            out = subprocess.run(
                [sys.executable, __file__, f"--child={mode}", f"--preset={FLAGS.preset}",
                 f"--batch_size={preset.train.batch_size}", f"--bptt={preset.train.num_predicted}",
                 f"--rounds={FLAGS.rounds}", f"--vocab_size={FLAGS.vocab_size}"],
                capture_output=True, text=True, env=env, check=False)
            lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
            if out.returncode != 0 or not lines:
                raise SystemExit(f"{mode} child failed:\n{out.stdout}\n{out.stderr[-3000:]}")
            record = json.loads(lines[-1])
            tokens = record["tokens_per_step"]
            pairs = _paired_ratios(record["times"])
            print(f"child {mode}: " + ", ".join(
                f"{kind} {1000 * np.median(record['times'][kind]):.1f} ms" for kind in KINDS)
                + f", psmm/lstm {np.median(pairs):.3f}", flush=True)
            for kind in KINDS:
                results[mode][kind].extend(record["times"][kind])
            ratios[mode].extend(pairs)
    print(f"preset {FLAGS.preset}, V = {FLAGS.vocab_size}, {tokens} predicted tokens per step, "
          f"{FLAGS.repeats} x {FLAGS.rounds} steps per row (medians)")
    print(f"{'mode':16} {'model':6} {'step ms':>9} {'tokens/s':>9} {'psmm/lstm':>10} "
          f"{'vs tensorflow':>14}")
    reference = {kind: np.median(results[FLAGS.modes[0]][kind]) for kind in KINDS}
    for mode in FLAGS.modes:
        for kind in KINDS:
            median = float(np.median(results[mode][kind]))
            ratio = f"{np.median(ratios[mode]):10.3f}" if kind == "psmm" else " " * 10
            print(f"{mode:16} {kind:6} {1000 * median:9.1f} {tokens / median:9.0f} {ratio} "
                  f"{median / reference[kind]:14.3f}", flush=True)


if __name__ == "__main__":
    app.run(main)
