r"""A trained run's model under a 16-bit policy against itself in float32: same weights, same
windows, same dropout and zoneout masks.

Prints (1) the validation perplexity of the first --max_eval_tokens tokens under each policy
(what 16-bit rounding costs a forward pass), and (2) per trainable variable, over --batches
training windows in training mode, the gradient's error against float32's: the relative error
`|g16 - g32| / |g32|` and the projection `g16 . g32 / |g32|^2` (1 when the 16-bit gradient is
not biased along float32's). A projection away from 1, or an error far above its neighbours',
locates a reduction that loses precision: this is how the bfloat16 sum in TensorFlow's bias
gradient was found (docs/experiments/2026-log.md, "bfloat16's bias gradient").

The gradients are those of psmm-train's step (`per_target_losses`, the run's pointer loss
weight, native kernels where they build), from a zero state and an empty memory per window, so
the windows are independent. The masks match because both models draw them from the same seed
generator states (reset before each window) and `locked_dropout.dropout` draws a 16-bit
model's masks as float32 ones.

Usage (any finished run, e.g. the float32 row of side_by_side.py --epochs=1):
  python benchmarks/precision_gradients.py --workdir=/tmp/bf16/psmm \
      --data_dir=/data/ptb --policy=mixed_bfloat16
"""

import numpy as np
import tensorflow as tf
from absl import app, flags

from psmm_tf import native
from psmm_tf.data.pipeline import training_windows
from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.evaluation.trained_run import load_trained_run
from psmm_tf.losses import per_target_losses
from psmm_tf.models import build_model

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "A finished psmm-train run (trained in float32).",
                    required=True)
flags.DEFINE_string("data_dir", None, "Where its corpus is now, if not where it was read.")
flags.DEFINE_enum("policy", "mixed_bfloat16", ["mixed_bfloat16", "mixed_float16"],
                  "The 16-bit policy compared with float32.")
flags.DEFINE_integer("batches", 4, "Training windows compared.", lower_bound=1)
flags.DEFINE_integer("skip", 200, "Training windows skipped first.", lower_bound=0)
flags.DEFINE_integer("max_eval_tokens", 20000, "Validation tokens scored under each policy.",
                     lower_bound=2)


def twin(run, policy):
    """The run's model rebuilt under `policy`, holding its weights and gate calibration."""
    model = build_model(run.config.model, dtype=policy)
    Evaluator(model, 1, 10).evaluate(run.corpus.ids["valid"][:20])  # builds every layer
    model.set_weights(run.model.get_weights())
    if getattr(run.model, "pointer", None) is not None:
        model.pointer.gate_calibration = run.model.pointer.gate_calibration
    return model


def seed_states(model):
    return [v for v in model.non_trainable_variables if "seed_generator_state" in v.path]


def window_gradients(model, batch, states, pointer_weight):
    """Loss and float64 gradients of one window, training mode, masks from `states`."""
    generators = seed_states(model)
    if len(generators) != len(states):
        raise ValueError("The two models do not have the same random generators.")
    for variable, state in zip(generators, states):
        variable.assign(state)
    rows = int(batch["targets"].shape[0])
    with native.enabled(), tf.GradientTape() as tape:
        outputs = model(batch["token_ids"], token_mask=batch["token_mask"],
                        state=model.zero_state(rows), memory=model.empty_memory(rows),
                        context_length=0, targets=batch["targets"], training=True)
        objective, _, _ = per_target_losses(model, outputs, batch["targets"], pointer_weight)
        loss = tf.reduce_sum(objective) / rows
    grads = tape.gradient(loss, model.trainable_variables)
    return float(loss), [tf.convert_to_tensor(g).numpy().astype(np.float64) for g in grads]


def main(argv):
    del argv
    run = load_trained_run(FLAGS.workdir, data_dir=FLAGS.data_dir)
    wide, narrow = run.model, twin(run, FLAGS.policy)
    print(f"{FLAGS.workdir}: {FLAGS.policy} against float32, the same weights")
    valid = run.corpus.ids["valid"]
    for name, model in (("float32", wide), (FLAGS.policy, narrow)):
        result = Evaluator(model, 1, 100).evaluate(valid, max_tokens=FLAGS.max_eval_tokens)
        print(f"valid[:{FLAGS.max_eval_tokens}] {name:15s} perplexity {result.perplexity:.3f}"
              f"  mean gate {result.mean_gate:.4f}")
    train = run.config.train
    windows = training_windows(run.corpus.ids["train"], batch_size=train.batch_size,
                               context_length=0, num_predicted=train.num_predicted)
    states = [v.numpy() for v in seed_states(wide)]
    errors = {}
    for k, batch in enumerate(windows.skip(FLAGS.skip).take(FLAGS.batches)):
        loss32, grads32 = window_gradients(wide, batch, states, train.pointer_loss_weight)
        loss16, grads16 = window_gradients(narrow, batch, states, train.pointer_loss_weight)
        print(f"window {FLAGS.skip + k}: loss float32 {loss32:.4f}, {FLAGS.policy} {loss16:.4f}")
        for variable, g32, g16 in zip(wide.trainable_variables, grads32, grads16, strict=True):
            norm = max(np.linalg.norm(g32), 1e-30)
            errors.setdefault(variable.path, []).append(
                (norm, np.linalg.norm(g16 - g32) / norm, np.sum(g16 * g32) / norm ** 2))
    print(f"\n{'variable':58s} {'|g32|':>9s} {'rel. error':>10s} {'projection':>10s}")
    for path, rows in errors.items():
        norm, error, projection = np.mean(rows, axis=0)
        print(f"{path:58s} {norm:9.4f} {error:10.4f} {projection:10.4f}")


if __name__ == "__main__":
    app.run(main)
