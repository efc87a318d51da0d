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


import numpy as np
import step_setup
from absl import app, flags

FLAGS = flags.FLAGS
step_setup.define_shape_flags()
flags.adopt_module_key_flags(step_setup)  # listed in --help
flags.DEFINE_integer("rounds", 5, "Timed steps per row (after 2 warm-up steps).", lower_bound=1)


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
    preset = step_setup.shaped_preset(FLAGS.preset, FLAGS.batch_size, FLAGS.bptt)
    rng = np.random.default_rng(0)
    batch = step_setup.random_batch(preset, FLAGS.vocab_size, rng)
    b, t = batch["targets"].shape

    def training_step(kind, **changes):
        model, optimizer = step_setup.model_and_optimizer(preset, kind, FLAGS.vocab_size)
        return step_setup.tensorflow_step(model, optimizer, batch,
                                          step_setup.step_settings(preset, **changes))

    runners = {
        "lstm": training_step("lstm"),
        "psmm": training_step("psmm"),
        "psmm_joint_clip": training_step("psmm", pointer_clip_norm=None),
        "pointer_alone": _pointer_runner(preset, batch, rng),
        "softmax_alone": _pointer_runner(preset, batch, rng, with_pointer=False),
    }
    times = step_setup.interleaved_times(runners, FLAGS.rounds)
    lstm = float(np.median(times["lstm"]))
    print(f"preset {FLAGS.preset}, V = {FLAGS.vocab_size}, B = {b}, T = {t}, "
          f"L = {preset.model.window_size}, {FLAGS.rounds} steps per row (medians)")
    for name, values in times.items():
        median = float(np.median(values))
        print(f"{name:16} {1000 * median:9.1f} ms  {median / lstm:6.3f} x lstm", flush=True)


if __name__ == "__main__":
    app.run(main)
