"""What the TensorFlow and JAX training steps share: the variable groups with norms of their
own and gradient clipping by group norms (`keras.ops`, any backend; the squared norm has a
faster TensorFlow form)."""

import keras
from keras import ops

from psmm_tf.layers.char_cnn import CharacterEmbedding


def _indices_of(model, layer):
    ids = {id(v) for v in layer.trainable_variables}
    return tuple(i for i, v in enumerate(model.trainable_variables) if id(v) in ids)


def pointer_variable_indices(model):
    """Indices into `model.trainable_variables` of its pointer head's variables (or ())."""
    pointer = getattr(model, "pointer", None)
    return () if pointer is None else _indices_of(model, pointer)


def char_cnn_variable_indices(model):
    """Indices into `model.trainable_variables` of its character-CNN input embedding's
    variables (`input_embedding="chars"`), or ()."""
    embedding = getattr(getattr(model, "backbone", None), "embedding", None)
    if not isinstance(embedding, CharacterEmbedding):
        return ()
    return _indices_of(model, embedding)


def clip_groups(model, pointer_clip_norm=None, char_cnn_clip_norm=None):
    """The groups of `model.trainable_variables` clipped by a norm of their own.

    Args:
        model: a `LanguageModel`.
        pointer_clip_norm: optional float. Limit of the pointer head's own norm.
        char_cnn_clip_norm: optional float. Limit of the character-CNN input embedding's own
            norm.

    Returns:
        tuple of `(indices, limit)`, one per group the model has and a limit was given for
        (indices into `model.trainable_variables`, disjoint); the rest is clipped by the
        step's `clip_norm`.
    """
    groups = []
    for indices, limit in ((pointer_variable_indices(model), pointer_clip_norm),
                           (char_cnn_variable_indices(model), char_cnn_clip_norm)):
        if limit is not None and indices:
            groups.append((indices, limit))
    return tuple(groups)


def squared_norm(x):
    """`sum(x^2)` of one tensor, a scalar in its dtype.

    On TensorFlow, `2 l2_loss(x)`: one pass that never writes `x^2` out. `sum(square(x))` ran
    2.1 times as long on a `(650, 10000)` float32 gradient on CPU (3.39 against 1.58 ms;
    docs/results.md, "The machine's limit"). XLA (JAX) fuses the two already.
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return 2.0 * tf.nn.l2_loss(x)
    return ops.sum(ops.square(x))


def clip_gradients(grads, clip_norm, groups=(), loss_scale=1.0):
    """Clips `grads` by their global norm, each of `groups` by its own.

    Each group is scaled as `tf.clip_by_global_norm` does, `g * limit / max(norm, limit)`, so
    a non-finite norm leaves the group non-finite (a loss-scaled step then skips the update).

    Args:
        grads: list of dense gradient tensors.
        clip_norm: float (or scalar tensor). Limit of the global norm of the gradients in no
            group.
        groups: `(indices, limit)` pairs (`clip_groups`): the gradients at `indices` are
            clipped by their own global norm at `limit`.
        loss_scale: float (or scalar tensor). `grads` are this times the true gradients (a
            `LossScaleOptimizer`'s scale, which unscales them after): the limits are scaled
            alike, so the true gradients are clipped.

    Returns:
        `(clipped, norm)`: the clipped list and the global norm of all of the true gradients
        before clipping.
    """
    grouped = {i for indices, _ in groups for i in indices}
    rest = [i for i in range(len(grads)) if i not in grouped]
    clipped, squares = list(grads), []
    for group, limit in [(rest, clip_norm)] + [(sorted(i), limit) for i, limit in groups]:
        if not group:
            continue
        limit = limit * loss_scale
        square = sum(squared_norm(grads[i]) for i in group)
        squares.append(square)
        scale = limit / ops.maximum(ops.sqrt(square), limit)
        for i in group:
            clipped[i] = grads[i] * ops.cast(scale, grads[i].dtype)
    return clipped, ops.sqrt(sum(squares)) / loss_scale
