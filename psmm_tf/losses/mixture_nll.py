"""The mixture's negative log-likelihood from its log-probabilities, for functional models."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="psmm_tf")
class MixtureNLL(keras.losses.Loss):
    """`-log p(y)` per target, read from the mixture's log-probabilities `(batch_size, T, V)`.

    The loss of a functional model ending in `psmm_tf.layers.PointerSentinelMixture`: unlike
    `SparseCategoricalCrossentropy(from_logits=True)` it does not normalise its input again
    (the log-probabilities already sum to 1 in probability), and unlike `PointerSentinelLoss`
    it needs no dict of the model's internals (so it has no eq. 9 pointer term). Saved in
    `.keras` files. Keras' reductions and `sample_weight` apply as for any loss.

    Call arguments:
        y_true: int `(batch_size, T)`, the targets in `[0, V)`.
        y_pred: float `(batch_size, T, V)`, log-probabilities.

    Returns:
        The reduced loss; with `reduction="none"`, float32 `(batch_size, T)`.
    """

    def __init__(self, reduction="sum_over_batch_size", name="mixture_nll", dtype=None):
        super().__init__(reduction=reduction, name=name, dtype=dtype)

    def call(self, y_true, y_pred):
        targets = ops.cast(y_true, "int32")
        picked = ops.take_along_axis(ops.cast(y_pred, "float32"), targets[..., None], axis=-1)
        return -picked[..., 0]
