"""What the TensorFlow and JAX training steps share: the step's settings, the model's training
call on a window batch and the objective's sums (`WindowStepSettings`), the variable groups
with norms of their own and gradient clipping by group norms (`keras.ops`, any backend; the
squared norm has a faster TensorFlow form)."""

import keras
from keras import ops

from psmm_tf.configs import TrainConfig
from psmm_tf.layers.char_cnn import CharacterEmbedding
from psmm_tf.losses import per_target_losses, window_sums


class WindowStepSettings:
    """The settings and the backend-independent pieces of a training step over window batches,
    shared by `psmm_tf.training.steps.TrainStep` (TensorFlow) and
    `psmm_tf.jax_train_step.JaxTrainStep` (JAX).

    Args:
        model: a `LanguageModel`. global_batch_size: int, rows B of the global batch (the loss
            is the sum over a window's targets / B). context_length: int, C (0 for "cache",
            window_size - 1 for "recompute"). use_memory: bool, carry the pointer memory.
        clip_norm: float. Global gradient norm limit (paper: 1) of the variables outside the
            groups below. pointer_clip_norm, char_cnn_clip_norm: optional floats, own limits of
            the pointer's and of a character-CNN input embedding's variables.
        pointer_weight: float. Weight of eq. 9's pointer term (1: the paper; 0: mixture NLL).
        The defaults are `TrainConfig`'s (psmm-train's).
    """

    def __init__(self, model, global_batch_size, context_length, use_memory,
                 clip_norm=TrainConfig.clip_norm, pointer_clip_norm=TrainConfig.pointer_clip_norm,
                 pointer_weight=TrainConfig.pointer_loss_weight,
                 char_cnn_clip_norm=TrainConfig.char_cnn_clip_norm):
        self.model = model
        self.global_batch_size = global_batch_size
        self.context_length = context_length
        self.use_memory = use_memory
        self.clip_norm = clip_norm
        self.pointer_clip_norm = pointer_clip_norm
        self.char_cnn_clip_norm = char_cnn_clip_norm
        self.pointer_weight = pointer_weight
        self.clip_groups = clip_groups(model, pointer_clip_norm, char_cnn_clip_norm)

    def zero_carry(self):
        """Zero LSTM state and (in "cache" mode) an empty pointer memory, for B rows."""
        rows = self.global_batch_size
        return (self.model.zero_state(rows),
                self.model.empty_memory(rows) if self.use_memory else None)

    def call_arguments(self, batch, state, memory):
        """Keyword arguments of the model's training call on `batch` (`training_windows`')."""
        return dict(token_mask=batch["token_mask"], state=state, memory=memory,
                    context_length=self.context_length, targets=batch["targets"],
                    training=True, token_chars=batch.get("token_chars"))

    def window_sums(self, outputs, batch, pointer_share=None):
        """`psmm_tf.losses.window_sums` of the model's `outputs` on `batch`."""
        objective, pointer_part, gate = per_target_losses(
            self.model, outputs, batch["targets"], self.pointer_weight,
            pointer_share=pointer_share)
        return window_sums(objective, pointer_part, gate,
                           ops.cast(batch["target_weights"], "float32"))

    def carried(self, outputs):
        """`(state, memory)` carried into the next window (memory None but in "cache" mode)."""
        return outputs["state"], outputs["memory"] if self.use_memory else None

    def clip(self, grads, loss_scale=1.0):
        """`clip_gradients` of `grads` by the step's limits: `(clipped, norm)`."""
        return clip_gradients(grads, self.clip_norm, self.clip_groups, loss_scale)


def warmup_factor(global_step, warmup_steps):
    """The factor of the step after `global_step` steps in a linear warm-up of `warmup_steps`
    steps: `(global_step + 1) / warmup_steps`, then 1."""
    if global_step >= warmup_steps:
        return 1.0
    return (global_step + 1) / warmup_steps


def clip_groups(model, pointer_clip_norm=None, char_cnn_clip_norm=None):
    """The groups of `model.trainable_variables` (a `LanguageModel`'s) clipped by a norm of
    their own: the pointer head's at `pointer_clip_norm` and a character-CNN input embedding's
    (`input_embedding="chars"`) at `char_cnn_clip_norm`, each when given.

    Returns:
        tuple of `(indices, limit)`, one per group the model has and a limit was given for
        (indices into `model.trainable_variables`, disjoint); the rest is clipped by the
        step's `clip_norm`.
    """
    embedding = getattr(getattr(model, "backbone", None), "embedding", None)
    if not isinstance(embedding, CharacterEmbedding):
        embedding = None
    groups = []
    for layer, limit in ((getattr(model, "pointer", None), pointer_clip_norm),
                         (embedding, char_cnn_clip_norm)):
        if layer is None or limit is None:
            continue
        ids = {id(v) for v in layer.trainable_variables}
        indices = tuple(i for i, v in enumerate(model.trainable_variables) if id(v) in ids)
        if indices:
            groups.append((indices, limit))
    return tuple(groups)


def squared_norm(x):
    """`sum(x^2)` of one tensor: a float32 scalar for float32 and 16-bit `x` (16-bit
    gradients are summed in float32), else a scalar in `x`'s dtype. On TensorFlow `x` may be
    `tf.IndexedSlices` whose rows are distinct (`psmm_tf.training.sgd_update.deduplicated`):
    the sum over its values is the dense tensor's.

    On TensorFlow, `2 l2_loss(x)`: one pass that never writes `x^2` out, where `sum(square(x))`
    takes two (docs/results.md, "The machine's limit"). Inside `psmm_tf.native.enabled()` (the
    training steps) it is one native pass that reads 16-bit `x` in its own dtype
    (`psmm_tf/native/sgd_update.cc`). XLA (JAX) fuses the two already.
    """
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        from psmm_tf import native

        if isinstance(x, tf.IndexedSlices):
            x = x.values
        library = native.library_for("sgd_update", x.dtype)
        if library is not None:
            return library.psmm_squared_norm(x)
        if x.dtype in (tf.bfloat16, tf.float16):
            x = tf.cast(x, tf.float32)
        return 2.0 * tf.nn.l2_loss(x)
    if keras.backend.standardize_dtype(x.dtype) in ("bfloat16", "float16"):
        x = ops.cast(x, "float32")
    return ops.sum(ops.square(x))


def clip_scales(grads, clip_norm, groups=(), loss_scale=1.0):
    """The factor each gradient is clipped by: `limit / max(norm, limit)` of its group.

    Each group is scaled as `tf.clip_by_global_norm` does, so a non-finite norm makes the
    group's factor non-finite (a loss-scaled step then skips the update).

    Args:
        grads: list of dense gradient tensors (16-bit ones are summed in float32); on
            TensorFlow also `tf.IndexedSlices` with distinct rows (`squared_norm`).
        clip_norm: float (or scalar tensor). Limit of the global norm of the gradients in no
            group.
        groups: `(indices, limit)` pairs (`clip_groups`): the gradients at `indices` are
            clipped by their own global norm at `limit`.
        loss_scale: float (or scalar tensor). `grads` are this times the true gradients (a
            `LossScaleOptimizer`'s scale, which unscales them after): the limits are scaled
            alike, so the true gradients are clipped.

    Returns:
        `(scales, norm)`: one scalar per gradient (float32 for float32 and 16-bit
        gradients), and the global norm of all of the true gradients before clipping.
    """
    grouped = {i for indices, _ in groups for i in indices}
    rest = [i for i in range(len(grads)) if i not in grouped]
    scales, squares = [None] * len(grads), []
    for group, limit in [(rest, clip_norm)] + [(sorted(i), limit) for i, limit in groups]:
        if not group:
            continue
        limit = limit * loss_scale
        square = sum(squared_norm(grads[i]) for i in group)
        squares.append(square)
        scale = limit / ops.maximum(ops.sqrt(square), limit)
        for i in group:
            scales[i] = scale
    return scales, ops.sqrt(sum(squares)) / loss_scale


def clip_gradients(grads, clip_norm, groups=(), loss_scale=1.0):
    """Clips `grads` by their global norm, each of `groups` by its own (`clip_scales`, whose
    arguments these are).

    Returns:
        `(clipped, norm)`: the clipped list (each in its gradient's dtype, a `tf.IndexedSlices`
        kept sparse: an optimizer updates only its rows) and the global norm of all of the true
        gradients before clipping.
    """
    scales, norm = clip_scales(grads, clip_norm, groups, loss_scale)
    return [_scaled(g, ops.cast(scale, g.dtype)) for g, scale in zip(grads, scales, strict=True)
            ], norm


def _scaled(grad, scale):
    if hasattr(grad, "indices"):  # tf.IndexedSlices
        return type(grad)(grad.values * scale, grad.indices, grad.dense_shape)
    return grad * scale
