"""The pointer softmax of Gulcehre et al. (2016): a switch computed from the RNN state alone."""

import keras
from keras import ops

from psmm_tf.layers.dense import affine
from psmm_tf.layers.pointer_sentinel import WindowedAttention


@keras.saving.register_keras_serializable(package="psmm_tf")
class PointerSoftmax(WindowedAttention):
    """A location softmax over the window, mixed with the vocabulary by an MLP switch on `h_t`.

    Gulcehre et al. ("Pointing the Unknown Words") choose between the shortlist softmax and the
    location softmax with a switch `z_t = sigmoid(v . tanh(W_z h_t + b_z) + c)` that sees the
    RNN state only, not the attention scores. Here the location softmax is the same windowed
    attention as `PointerSentinel` (`softmax_i(q . h_i)` over the window) and the switch plays
    the sentinel's role: `gate = z_t` is the vocabulary's share and `attention = (1 - z_t) *
    location_softmax`. Outputs therefore obey the same contract as `PointerSentinel` and feed
    the same mixture ops, which lets the two gates be compared with everything else equal (the
    pointer sentinel paper's argument is that a gate inside the pointer does better).

    Args:
        window_size: int. `L`, as for `PointerSentinel`.
        switch_units: int. Hidden units of the switch MLP.
        kernel_initializer: initializer of the query and switch kernels.

    Call arguments and returns: as `PointerSentinel`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.layers import PointerSoftmax

    pointer = PointerSoftmax(window_size=100, switch_units=64)
    hidden = np.random.default_rng(0).normal(size=(4, 35, 200)).astype("float32")
    attention, gate = pointer(hidden)  # as PointerSentinel: (4, 35, 35), (4, 35)
    ```

    References:
        - [Gulcehre et al., 2016](https://arxiv.org/abs/1603.08148)
    """

    def __init__(self, window_size, switch_units=64, kernel_initializer="glorot_uniform",
                 **kwargs):
        # Configs saved before the shared base held these (always None here).
        for name in ("initial_gate", "gate_calibration", "sentinel_initializer"):
            value = kwargs.pop(name, None)
            if value is not None and name != "sentinel_initializer":
                raise ValueError(f"PointerSoftmax has no sentinel: {name} sets PointerSentinel's "
                                 f"gate, got {value!r}.")
        super().__init__(window_size, kernel_initializer=kernel_initializer, **kwargs)
        if not isinstance(switch_units, int) or switch_units < 1:
            raise ValueError(f"switch_units must be an integer >= 1, got {switch_units!r}.")
        self.switch_units = switch_units

    def build(self, hidden_shape, memory_shape=None, memory_mask_shape=None):
        dim = self._build_query(hidden_shape)
        self.switch_kernel = self.add_weight(
            name="switch_kernel", shape=(dim, self.switch_units),
            initializer=self.kernel_initializer,
        )
        self.switch_bias = self.add_weight(
            name="switch_bias", shape=(self.switch_units,), initializer="zeros"
        )
        self.switch_output = self.add_weight(
            name="switch_output", shape=(self.switch_units,), initializer=self._vector_init
        )
        self.switch_output_bias = self.add_weight(
            name="switch_output_bias", shape=(), initializer="zeros"
        )

    def _vector_init(self, shape, dtype=None):
        return ops.reshape(self.kernel_initializer((shape[0], 1), dtype=dtype), shape)

    def call(self, hidden, memory=None, memory_mask=None):
        query, key_scores, allowed = self.window_scores(hidden, memory, memory_mask)
        location = ops.softmax(key_scores, axis=-1)
        location = ops.where(allowed, location, ops.cast(0.0, query.dtype))
        # The switch sees h_t only: z = sigmoid(v . tanh(W_z h_t + b_z) + c).
        switch_hidden = ops.tanh(affine(hidden, self.switch_kernel, self.switch_bias))
        switch = ops.sigmoid(ops.einsum("btu,u->bt", switch_hidden, self.switch_output)
                             + self.switch_output_bias)
        switch = ops.cast(switch, query.dtype)
        return (1.0 - switch)[..., None] * location, switch

    def get_config(self):
        config = super().get_config()
        config["switch_units"] = self.switch_units
        return config
