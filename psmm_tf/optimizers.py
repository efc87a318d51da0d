"""The optimizer of a run's `TrainConfig`: Keras only, so psmm-train (TensorFlow) and
`JaxTrainStep` (JAX, with or without TensorFlow installed) build the same one."""

import keras


def make_optimizer(train_config):
    """The Keras optimizer of `train_config` ("sgd" or "adam") at its initial learning rate;
    under mixed_float16 wrapped in a `LossScaleOptimizer` (dynamic loss scaling: float16
    gradients of a loss summed over a window underflow or overflow without it)."""
    if train_config.optimizer == "adam":
        optimizer = keras.optimizers.Adam(learning_rate=train_config.learning_rate)
    else:
        optimizer = keras.optimizers.SGD(learning_rate=train_config.learning_rate)
    if train_config.mixed_precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
