"""The pointer sentinel mixture as a Keras layer, for functional models and `.keras` files."""

import keras
from keras import ops

from psmm_tf.layers.mixture import mixture_distribution

# The floor under probabilities before a log: the smallest normal float32 (about -87.3 after).
_TINY = 1.1754944e-38


@keras.saving.register_keras_serializable(package="psmm_tf")
class PointerSentinelMixture(keras.layers.Layer):
    """`p(y) = g p_vocab(y) + sum_{i: x_i = y} a_i` (paper eq. 3) over the whole vocabulary.

    The layer form of `psmm_tf.layers.mixture_distribution`: it takes `keras.Input` tensors in
    a functional model (the function, called on symbolic tensors outside a layer, cannot) and
    saves in `.keras` files. It has no weights.

    Args:
        output_mode: "log_probs" (default; the log of the mixture, floored at the smallest normal
            float32 so that a word with probability 0 stays finite: logits whose softmax is
            the mixture, for `MixtureNLL` or `SparseCategoricalCrossentropy(from_logits=True)`)
            or "probs".

    Call arguments:
        inputs: a list `[vocab_logits, attention, gate, key_ids]`: float `(batch_size, T, V)`,
            float `(batch_size, T, K)` (e.g. `PointerSentinel`'s attention over the keys),
            float `(batch_size, T)` (the sentinel's gate) and int `(batch_size, K)` in `[0, V)`
            (the word at each key).

    Returns:
        float32 `(batch_size, T, V)`.

    Example:
    ```python
    import keras
    from psmm_tf.layers import PointerSentinelMixture

    logits = keras.Input((None, 100))
    attention = keras.Input((None, 30))
    gate = keras.Input((None,))
    key_ids = keras.Input((30,), dtype="int32")
    log_p = PointerSentinelMixture()([logits, attention, gate, key_ids])
    model = keras.Model([logits, attention, gate, key_ids], log_p)
    ```
    """

    OUTPUT_MODES = ("log_probs", "probs")

    def __init__(self, output_mode="log_probs", **kwargs):
        super().__init__(**kwargs)
        if output_mode not in self.OUTPUT_MODES:
            raise ValueError(f"output_mode must be one of {self.OUTPUT_MODES}, got "
                             f"{output_mode!r}.")
        self.output_mode = output_mode

    def call(self, inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 4:
            raise ValueError("PointerSentinelMixture takes a list [vocab_logits, attention, "
                             f"gate, key_ids], got {type(inputs).__name__} of "
                             f"{len(inputs) if isinstance(inputs, (list, tuple)) else 1}.")
        distribution = mixture_distribution(*inputs)
        if self.output_mode == "probs":
            return distribution
        return ops.log(ops.maximum(distribution, _TINY))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[0])

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(tuple(inputs[0].shape), dtype="float32")

    def get_config(self):
        return dict(super().get_config(), output_mode=self.output_mode)
