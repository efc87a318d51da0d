"""Dropout whose 16-bit masks are a float32 model's: `dropout`, and variational ("locked")
dropout, one mask per sequence shared across time steps: `LockedDropout`."""

import keras
from keras import ops

_SIXTEEN_BIT = ("bfloat16", "float16")


def dropout(inputs, rate, seed, noise_shape=None):
    """`keras.random.dropout`, with 16-bit inputs masked and scaled as float32 inputs are.

    `keras.random.dropout` draws a 16-bit input's mask in its dtype: on TensorFlow a bfloat16
    uniform number takes 128 values, so a unit is kept with a probability that is a multiple of
    1/128 (0.8984 for rate 0.1), and the scale `1 / (1 - rate)` is rounded too (1.109 for
    1.111). Together they shrink the expected output (by 0.31% at rate 0.1, 0.62% at 0.3) in
    training only, a mismatch with evaluation, which does not drop. Here the mask is drawn as
    for a float32 input of `noise_shape` (the same numbers from the same seed: a bfloat16 model
    and its float32 twin drop the same units), applied in float32, and the product rounded once
    to the input's dtype. Other dtypes go to `keras.random.dropout` as they are.

    Args:
        inputs: float tensor.
        rate: float in [0, 1). Fraction of units dropped.
        seed: a `keras.random.SeedGenerator` (or int seed).
        noise_shape: optional shape that broadcasts to `inputs`' (None: `inputs`' own).

    Returns:
        A tensor of `inputs`' shape and dtype: units zeroed and the rest scaled by
        `1 / (1 - rate)`.
    """
    dtype = keras.backend.standardize_dtype(inputs.dtype)
    if dtype not in _SIXTEEN_BIT:
        return keras.random.dropout(inputs, rate, noise_shape=noise_shape, seed=seed)
    shape = ops.shape(inputs) if noise_shape is None else noise_shape
    scale = keras.random.dropout(ops.ones(shape, "float32"), rate, noise_shape=shape, seed=seed)
    return ops.cast(ops.cast(inputs, "float32") * scale, dtype)


@keras.saving.register_keras_serializable(package="psmm_tf")
class LockedDropout(keras.layers.Layer):
    """Dropout whose mask is drawn once per sequence and reused at every time step.

    Gal and Ghahramani (2016) show that sharing the mask over time is what makes dropout a
    sound regulariser for recurrent networks. Active only in training; the identity otherwise.

    Args:
        rate: float in [0, 1). Fraction of units dropped.
        seed: optional int. Seed of the layer's random generator.

    Call arguments:
        inputs: float tensor of shape `(batch_size, T, D)`.
        training: bool. Dropout is applied only when True.

    Returns:
        A tensor of the same shape, with units zeroed per `(batch, feature)` across all `T`
        and the rest scaled by `1 / (1 - rate)`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.layers import LockedDropout

    dropout = LockedDropout(0.5, seed=1)
    x = np.ones((2, 35, 8), "float32")
    y = np.asarray(dropout(x, training=True))
    assert (y == y[:, :1]).all()  # one mask per sequence, the same at every step
    ```

    References:
        - [Gal and Ghahramani, 2016](https://arxiv.org/abs/1512.05287)
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"rate must be in [0, 1), got {rate!r}.")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.supports_masking = True

    def call(self, inputs, training=False):
        if not training or self.rate == 0.0:
            return inputs
        shape = ops.shape(inputs)
        return dropout(inputs, self.rate, self.seed_generator, noise_shape=(shape[0], 1, shape[2]))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config
