"""Variational ("locked") dropout: one mask per sequence, shared across time steps."""

import keras
from keras import ops


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
        return keras.random.dropout(
            inputs, self.rate, noise_shape=(shape[0], 1, shape[2]), seed=self.seed_generator
        )

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config
