"""What the TensorFlow and JAX training steps share: the pointer's variable group and gradient
clipping by group norms (`keras.ops`, any backend)."""

from keras import ops


def pointer_variable_indices(model):
    """Indices into `model.trainable_variables` of its pointer head's variables (or ())."""
    pointer = getattr(model, "pointer", None)
    if pointer is None:
        return ()
    ids = {id(v) for v in pointer.trainable_variables}
    return tuple(i for i, v in enumerate(model.trainable_variables) if id(v) in ids)


def clip_gradients(grads, clip_norm, pointer_indices=(), pointer_clip_norm=None, loss_scale=1.0):
    """Clips `grads` by their global norm, the pointer's group by its own norm if asked.

    Each group is scaled as `tf.clip_by_global_norm` does, `g * limit / max(norm, limit)`, so
    a non-finite norm leaves the group non-finite (a loss-scaled step then skips the update).

    Args:
        grads: list of dense gradient tensors.
        clip_norm: float (or scalar tensor). Limit of the global norm of all gradients, or,
            with `pointer_clip_norm`, of those not in `pointer_indices`.
        pointer_indices: indices into `grads` of the pointer's variables.
        pointer_clip_norm: optional float. Limit of the pointer group's own global norm.
        loss_scale: float (or scalar tensor). `grads` are this times the true gradients (a
            `LossScaleOptimizer`'s scale, which unscales them after): the limits are scaled
            alike, so the true gradients are clipped.

    Returns:
        `(clipped, norm)`: the clipped list and the global norm of all of the true gradients
        before clipping.
    """
    groups = [(list(range(len(grads))), clip_norm * loss_scale)]
    if pointer_clip_norm is not None and pointer_indices:
        pointer = sorted(pointer_indices)
        rest = [i for i in range(len(grads)) if i not in set(pointer)]
        groups = [(rest, clip_norm * loss_scale), (pointer, pointer_clip_norm * loss_scale)]
    clipped, squares = list(grads), []
    for group, limit in groups:
        square = sum(ops.sum(ops.square(grads[i])) for i in group)
        squares.append(square)
        scale = limit / ops.maximum(ops.sqrt(square), limit)
        for i in group:
            clipped[i] = grads[i] * ops.cast(scale, grads[i].dtype)
    return clipped, ops.sqrt(sum(squares)) / loss_scale
