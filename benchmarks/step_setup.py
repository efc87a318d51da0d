"""What the step benchmarks share: a random batch, a preset's model and its step settings, a
TensorFlow training step, and the warm-up-then-time loop (no flags: the scripts own theirs)."""

import time

import numpy as np


def define_shape_flags():
    """The flags every step benchmark takes: --preset, --batch_size, --bptt, --vocab_size."""
    from absl import flags

    flags.DEFINE_string("preset", "medium", "Model preset.")
    flags.DEFINE_integer("batch_size", None, "Rows of the step's batch (default: the preset's).",
                         lower_bound=1)
    flags.DEFINE_integer("bptt", None, "Targets per row (default: the preset's num_predicted).",
                         lower_bound=1)
    flags.DEFINE_integer("vocab_size", 10000, "Vocabulary size (PTB: 10,000).", lower_bound=2)


def shaped_preset(name, batch_size=None, bptt=None):
    """The preset `name` with its training batch set to `batch_size` x `bptt` where given."""
    from psmm_tf import configs

    train = {key: value for key, value in (("batch_size", batch_size), ("num_predicted", bptt))
             if value is not None}
    return configs.get_preset(name).replace(train=train)


def random_batch(preset, vocab_size, rng):
    """A training batch of the preset's shape: `(batch_size, num_predicted)` random ids."""
    shape = (preset.train.batch_size, preset.train.num_predicted)
    return {"token_ids": rng.integers(0, vocab_size, shape).astype("int32"),
            "token_mask": np.ones(shape, bool),
            "targets": rng.integers(0, vocab_size, shape).astype("int32"),
            "target_weights": np.ones(shape, "float32")}


def model_and_optimizer(preset, kind, vocab_size, dtype=None):
    """The preset's model of `kind` (seed 0, Keras dtype policy `dtype`) and psmm-train's
    optimizer for it (SGD at the preset's learning rate; loss scaling under mixed_float16)."""
    from psmm_tf import configs
    from psmm_tf.models import build_model
    from psmm_tf.optimizers import make_optimizer

    model = build_model(configs.dataclasses.replace(
        preset.model, kind=kind, vocab_size=vocab_size, seed=0), dtype=dtype)
    train = configs.dataclasses.replace(preset.train, mixed_precision=dtype or "float32")
    return model, make_optimizer(train)


def step_settings(preset, **changes):
    """The presets' training-step settings ("cache" memory), with `changes`."""
    train = preset.train
    settings = dict(context_length=0, use_memory=True, clip_norm=train.clip_norm,
                    pointer_clip_norm=train.pointer_clip_norm,
                    char_cnn_clip_norm=train.char_cnn_clip_norm,
                    pointer_weight=train.pointer_loss_weight)
    settings.update(changes)
    return settings


def tensorflow_step(model, optimizer, batch, settings, jit_compile=False):
    """A callable running one `TrainStep` on `batch` (state and memory carried); it returns
    once the step is done."""
    import tensorflow as tf

    from psmm_tf.training.steps import TrainStep

    optimizer.build(model.trainable_variables)
    step = TrainStep(model, optimizer, tf.distribute.get_strategy(), len(batch["targets"]),
                     jit_compile=jit_compile, **settings)
    carry = list(step.initial_carry())
    tensors = {k: tf.constant(v) for k, v in batch.items()}

    def run():
        metrics, carry[0], carry[1] = step(tensors, carry[0], carry[1])
        float(metrics["loss"])  # wait for the step

    return run


def jax_step(model, optimizer, batch, settings):
    """A callable running one `JaxTrainStep` on `batch` (NumPy arrays; state and memory
    carried); it returns once the step is done."""
    from psmm_tf.jax_train_step import JaxTrainStep

    step = JaxTrainStep(model, optimizer, len(batch["targets"]), **settings)
    carry = [None, None]

    def run():
        metrics, carry[0], carry[1] = step(batch, carry[0], carry[1])
        float(metrics["loss"])  # wait for the step

    return run


def interleaved_times(runners, rounds):
    """{name: [seconds]}: each runner called twice untimed (trace, warm up), then `rounds`
    times in turn (A B C A B C ...), so that load from elsewhere hits all alike."""
    for runner in runners.values():
        runner()
        runner()
    times = {name: [] for name in runners}
    for _ in range(rounds):
        for name, runner in runners.items():
            start = time.perf_counter()
            runner()
            times[name].append(time.perf_counter() - start)
    return times
