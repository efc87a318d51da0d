"""The training objective per target of any language-model task, on every Keras backend."""

from keras import ops

from psmm_tf.layers import pointer_loss


def per_target_losses(model, outputs, targets, pointer_weight=1.0, pointer_share=None):
    """The objective and its pointer part per target, and the gate.

    For models with a pointer the objective is the paper's eq. 9,
    `-log p(y) - pointer_weight * log(g + sum_{i: x_i = y} a_i)`; for the LSTM baseline it is
    the softmax cross-entropy `-log p_vocab(y)`. Shared by the TensorFlow training step
    (`psmm_tf.training.steps`) and the JAX one (`psmm_tf.jax_train_step`).

    Args:
        model: the `LanguageModel` that produced `outputs`.
        outputs: its output dict.
        targets: int `(batch_size, T)`.
        pointer_weight: float. Weight of eq. 9's pointer term (1: the paper; 0: the mixture's
            negative log-likelihood alone).
        pointer_share: optional float scalar (tensor) `rho` in [0, 1]: the objective is that of
            `(1 - rho) p_vocab + rho p` instead of `p` (eq. 3), a warm-up of the pointer's share
            (`TrainConfig.pointer_warmup_steps`). The same mixture with the gate `g + (1 - rho)
            (1 - g)` and the attention `rho a`; None (or 1) is the model's own `p`.

    Returns:
        `(objective, pointer_part, gate)`, each float32 `(batch_size, T)`. `objective -
        pointer_part` is the mixture's negative log-likelihood; `pointer_part` is 0 and `gate` 1
        for models without a pointer.
    """
    if "attention" not in outputs:
        nll = -model.log_prob(outputs, targets)
        return nll, ops.zeros_like(nll), ops.ones_like(nll)
    gate = ops.cast(outputs["gate"], "float32")
    if pointer_share is not None:
        share = ops.cast(pointer_share, outputs["gate"].dtype)
        outputs = dict(outputs, gate=outputs["gate"] + (1 - share) * (1 - outputs["gate"]),
                       attention=ops.cast(share, outputs["attention"].dtype)
                       * outputs["attention"])
    nll = -model.log_prob(outputs, targets)  # the mixture's, once (eq. 3)
    if pointer_weight == 0.0:
        return nll, ops.zeros_like(nll), gate
    # Eq. 9: the mixture NLL plus the pointer's own supervision term (`PointerSentinelLoss`).
    pointer_part = pointer_weight * pointer_loss(outputs["attention"], outputs["gate"],
                                                 outputs["key_ids"], targets)
    return nll + pointer_part, pointer_part, gate


def window_sums(objective, pointer_part, gate, weights):
    """The batch's sums of a training step's metrics, each a scalar.

    Args:
        objective, pointer_part, gate: from `per_target_losses`, `(batch_size, T)`.
        weights: float `(batch_size, T)`, 1 for a real target and 0 for padding.

    Returns:
        A dict with `loss` (the objective), `nll` (the mixture's negative log-likelihood),
        `pointer_loss`, `gate` and `weight` (the number of targets), summed over the batch.
    """
    return {
        "loss": ops.sum(objective * weights),
        "nll": ops.sum((objective - pointer_part) * weights),
        "pointer_loss": ops.sum(pointer_part * weights),
        "gate": ops.sum(gate * weights),
        "weight": ops.sum(weights),
    }
