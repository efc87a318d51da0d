"""The training loss of the pointer sentinel mixture model (paper eq. 9)."""

import keras
from keras import ops

from psmm_tf.layers import mixture

_REDUCTIONS = ("sum_over_batch_size", "mean_with_sample_weight", "sum", "none")


@keras.saving.register_keras_serializable(package="psmm_tf")
class PointerSentinelLoss(keras.losses.Loss):
    """`-log p(y) - pointer_weight * log(g + sum_{i: x_i = y} a_i)`, per target (eq. 9).

    The first term is the mixture's negative log-likelihood; the second supervises the pointer
    directly: its mass should sit on the target's occurrences in the window, or on the sentinel
    where the target is absent. `pointer_weight=0` drops the second term (an ablation).

    Args:
        pointer_weight: float >= 0. Weight of the pointer term; the paper uses 1.
        reduction: one of "sum_over_batch_size" (Keras' default: divide by the number of
            targets), "mean_with_sample_weight" (divide by the sum of the weights), "sum", "none".
        name: name of the loss.

    Call arguments:
        y_true: int `(batch_size, T)`, the targets.
        y_pred: dict with `vocab_logits` `(batch_size, T, V)` (or a sampled softmax's
            `target_vocab_log_prob` `(batch_size, T)`), `attention` `(batch_size, T, K)`,
            `gate` `(batch_size, T)` and `key_ids` `(batch_size, K)`: the outputs of
            `PointerSentinelLM`. Without `attention` (a task without a pointer, e.g.
            `LSTMLanguageModel`) the loss is the softmax's negative log-likelihood.
        sample_weight: optional float `(batch_size, T)`, e.g. zero for padding.

    Returns:
        The reduced loss (a scalar with the default reduction).

    Example:
    ```python
    import numpy as np
    from psmm_tf.losses import PointerSentinelLoss
    from psmm_tf.models import LSTMBackbone, PointerSentinelLM

    backbone = LSTMBackbone(vocab_size=100, embedding_dim=16, hidden_dim=16, num_layers=2)
    model = PointerSentinelLM(backbone, window_size=10)
    ids = np.random.default_rng(0).integers(0, 100, size=(4, 36)).astype("int32")
    outputs = model(ids[:, :-1], memory=model.empty_memory(4), training=True)
    loss = PointerSentinelLoss(pointer_weight=1.0)(ids[:, 1:], outputs)  # eq. 9, a scalar
    ```
    """

    def __init__(self, pointer_weight=1.0, reduction="sum_over_batch_size",
                 name="pointer_sentinel_loss", dtype=None):
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}.")
        super().__init__(reduction=reduction, name=name, dtype=dtype)
        if pointer_weight < 0:
            raise ValueError(f"pointer_weight must be >= 0, got {pointer_weight!r}.")
        self.pointer_weight = float(pointer_weight)

    def __call__(self, y_true, y_pred, sample_weight=None):
        # keras.losses.Loss.__call__ would cast every input, the key ids included, to the loss
        # dtype; the ids must stay integers, so the values are computed and reduced here.
        values = self.call(y_true, y_pred)
        if sample_weight is None:
            sample_weight = ops.ones_like(values)
        sample_weight = ops.cast(sample_weight, values.dtype)
        values = values * sample_weight
        if self.reduction == "none":
            return values
        total = ops.sum(values)
        if self.reduction == "sum":
            return total
        if self.reduction == "mean_with_sample_weight":
            return ops.divide_no_nan(total, ops.sum(sample_weight))
        return ops.divide_no_nan(total, ops.cast(ops.size(values), values.dtype))

    def call(self, y_true, y_pred):
        targets = ops.cast(y_true, "int32")
        if "attention" not in y_pred:  # a task without a pointer: the softmax's NLL
            if "target_vocab_log_prob" in y_pred:
                return -ops.cast(y_pred["target_vocab_log_prob"], "float32")
            return -mixture.vocab_log_prob(y_pred["vocab_logits"], targets)
        key_ids = ops.cast(y_pred["key_ids"], "int32")
        attention, gate = y_pred["attention"], y_pred["gate"]
        if "target_vocab_log_prob" in y_pred:  # a sampled softmax's estimate (training)
            nll = -mixture.mixture_log_prob_from_vocab(y_pred["target_vocab_log_prob"], attention,
                                                       gate, key_ids, targets)
        else:
            nll = -mixture.mixture_log_prob(y_pred["vocab_logits"], attention, gate, key_ids,
                                            targets)
        if self.pointer_weight == 0.0:
            return nll
        return nll + self.pointer_weight * mixture.pointer_loss(attention, gate, key_ids, targets)

    def get_config(self):
        config = super().get_config()
        config.update({"pointer_weight": self.pointer_weight})
        return config
