r"""Where PSMM's training step spends its time beyond the LSTM's, side by side in one process.

Rows (TensorFlow, XLA off, the presets' training step: "cache" memory, SGD), interleaved round
by round (A B C D A B C D ...) so that load from elsewhere hits all alike:
  lstm               the LSTM language model's step.
  psmm               PSMM's step as the presets train it (the pointer clipped by its own norm).
  psmm_joint_clip    the same with one joint gradient norm (no second clipping group).
  pointer_alone      forward and backward of the pointer and the mixture only (eqs. 3-7),
                     on fixed hidden states and vocabulary logits of the step's shapes.
  softmax_alone      the same for the vocabulary softmax's log-probability alone (what the
                     LSTM's loss computes): pointer_alone - softmax_alone is the pointer's math.
The ratios to `lstm` split PSMM's overhead into the pointer's own math and the rest.

Usage:
  python benchmarks/pointer_cost.py --preset=medium --rounds=5
"""

import time

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "medium", "Model preset.")
flags.DEFINE_integer("rounds", 5, "Timed steps per row (after 2 warm-up steps).", lower_bound=1)
flags.DEFINE_integer("vocab_size", 10000, "Vocabulary size (PTB: 10,000).", lower_bound=2)


def _step_runner(preset, kind, batch, pointer_clip_norm):
    import keras
    import tensorflow as tf

    from psmm_tf import configs
    from psmm_tf.models import build_model
    from psmm_tf.training.steps import TrainStep

    model = build_model(configs.dataclasses.replace(
        preset.model, kind=kind, vocab_size=FLAGS.vocab_size, seed=0))
    optimizer = keras.optimizers.SGD(preset.train.learning_rate)
    optimizer.build(model.trainable_variables)
    step = TrainStep(model, optimizer, tf.distribute.get_strategy(), len(batch["targets"]),
                     context_length=0, use_memory=True, clip_norm=preset.train.clip_norm,
                     pointer_clip_norm=pointer_clip_norm,
                     pointer_weight=preset.train.pointer_loss_weight)
    carry = list(step.initial_carry())
    tensors = {k: tf.constant(v) for k, v in batch.items()}

    def run():
        metrics, carry[0], carry[1] = step(tensors, carry[0], carry[1])
        float(metrics["loss"])  # wait for the step

    return run


def _pointer_runner(preset, batch, rng, with_pointer=True):
    import tensorflow as tf

    from psmm_tf.layers import PointerSentinel, mixture_log_prob, vocab_log_prob

    b, t = batch["targets"].shape
    window, dim = preset.model.window_size, preset.model.hidden_dim
    memory_size = window - 1
    pointer = PointerSentinel(window)
    hidden = tf.constant(rng.standard_normal((b, t, dim)).astype("float32") * 0.1)
    memory = tf.constant(rng.standard_normal((b, memory_size, dim)).astype("float32") * 0.1)
    memory_mask = tf.ones((b, memory_size), tf.bool)
    logits = tf.constant(rng.standard_normal((b, t, FLAGS.vocab_size)).astype("float32"))
    key_ids = tf.constant(rng.integers(0, FLAGS.vocab_size, (b, memory_size + t)), tf.int32)
    targets = tf.constant(batch["targets"])
    pointer(hidden, memory=memory, memory_mask=memory_mask)  # build

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch([hidden, logits])
            if with_pointer:
                attention, gate = pointer(hidden, memory=memory, memory_mask=memory_mask)
                log_probs = mixture_log_prob(logits, attention, gate, key_ids, targets)
            else:
                log_probs = vocab_log_prob(logits, targets)
            loss = -tf.reduce_sum(log_probs)
        sources = [hidden, logits, *pointer.trainable_variables] if with_pointer else [logits]
        return loss, tape.gradient(loss, sources)

    def run():
        float(step()[0])

    return run


def main(argv):
    del argv
    from psmm_tf import configs

    preset = configs.get_preset(FLAGS.preset)
    rng = np.random.default_rng(0)
    b, t = preset.train.batch_size, preset.train.num_predicted
    batch = {"token_ids": rng.integers(0, FLAGS.vocab_size, (b, t)).astype("int32"),
             "token_mask": np.ones((b, t), bool),
             "targets": rng.integers(0, FLAGS.vocab_size, (b, t)).astype("int32"),
             "target_weights": np.ones((b, t), "float32")}
    runners = {
        "lstm": _step_runner(preset, "lstm", batch, preset.train.pointer_clip_norm),
        "psmm": _step_runner(preset, "psmm", batch, preset.train.pointer_clip_norm),
        "psmm_joint_clip": _step_runner(preset, "psmm", batch, None),
        "pointer_alone": _pointer_runner(preset, batch, rng),
        "softmax_alone": _pointer_runner(preset, batch, rng, with_pointer=False),
    }
    for runner in runners.values():
        runner()
        runner()  # trace, then one more untimed step
    times = {name: [] for name in runners}
    for _ in range(FLAGS.rounds):
        for name, runner in runners.items():
            start = time.perf_counter()
            runner()
            times[name].append(time.perf_counter() - start)
    lstm = float(np.median(times["lstm"]))
    print(f"preset {FLAGS.preset}, V = {FLAGS.vocab_size}, B = {b}, T = {t}, "
          f"L = {preset.model.window_size}, {FLAGS.rounds} steps per row (medians)")
    for name, values in times.items():
        median = float(np.median(values))
        print(f"{name:16} {1000 * median:9.1f} ms  {median / lstm:6.3f} x lstm", flush=True)


if __name__ == "__main__":
    app.run(main)
