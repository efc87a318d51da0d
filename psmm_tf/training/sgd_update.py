"""Plain SGD with the clip scales folded into the update, reading each gradient in its own dtype
(TensorFlow; the training step `TrainStep` uses it where `supports` says so).

Keras' SGD after `clip_gradients` makes five passes over each gradient of a mixed-precision
step: the widening of the 16-bit gradient to float32 (the gradient of the autocast read), its
squared norm, the clip multiply, the learning-rate multiply and the update. Here the gradient
stays in the dtype it was computed in (`unwidened`), and each weight takes

    w <- w - (lr c) g

with `c` the clip scale of its group (`psmm_tf.gradients.clip_scales`), in float32: two passes,
the squared norm and the update, one native kernel each inside `psmm_tf.native.enabled()`
(`psmm_tf/native/sgd_update.cc`), TensorFlow ops elsewhere. It is Keras' SGD update
(`w - lr g`, momentum 0) of the clipped gradient, to float32 rounding: the product `lr c` is
rounded once where Keras rounds `c g` and then `lr (c g)`. An embedding's gradient stays
`tf.IndexedSlices` (`deduplicated`): its norm and its update read the rows the batch looked up,
not the whole table, and the native row update writes them in place (TensorFlow's
`ResourceScatterSub` would make every later read of the table a copy). Measured in
`benchmarks/machine_limit.py` (docs/design_notes.md, "The SGD update reads each gradient twice"
and "An embedding's gradient stays its rows").
"""

import keras
import tensorflow as tf

from psmm_tf import native

# The widening of a gradient from these dtypes to float32 is exact, so it can be left undone.
SIXTEEN_BIT = (tf.bfloat16, tf.float16)


def supports(optimizer, variables):
    """Whether `apply` is `optimizer.apply_gradients` of the same gradients: a Keras `SGD`
    (exactly, no subclass) with no momentum, weight decay, own clipping, EMA, gradient
    accumulation or loss-scale factor, over float32 variables with no constraint."""
    if type(optimizer) is not keras.optimizers.SGD:
        return False
    plain = (not optimizer.momentum and not optimizer.nesterov
             and optimizer.weight_decay is None and optimizer.clipnorm is None
             and optimizer.clipvalue is None and optimizer.global_clipnorm is None
             and not optimizer.use_ema and optimizer.gradient_accumulation_steps is None
             and optimizer.loss_scale_factor is None)
    return plain and all(v.dtype == "float32" and v.constraint is None for v in variables)


def unwidened(grad):
    """`grad` before its widening to float32, where it is one: the gradient of a float32
    weight read as a 16-bit value (Keras' autocast) is the 16-bit gradient cast to float32,
    exactly. Other gradients, `tf.IndexedSlices` among them, are returned as they are. Graph
    tensors only (a `tf.function`)."""
    if (isinstance(grad, tf.IndexedSlices) or grad.dtype != tf.float32
            or not hasattr(grad, "op") or grad.op.type != "Cast"):
        return grad
    source = grad.op.inputs[0]
    return source if source.dtype in SIXTEEN_BIT else grad


def deduplicated(grad):
    """An embedding's `tf.IndexedSlices` gradient with each row once: the values of a row
    looked up more than once summed (in float32 for 16-bit values), so that the squared norm
    of its values is the dense gradient's and `apply` writes each row once. Dense gradients
    are returned as they are.

    Args:
        grad: a gradient tensor, or `tf.IndexedSlices` of `(N, ...)` values at `(N,)` rows.

    Returns:
        `grad`, or `tf.IndexedSlices` of `(U, ...)` float32 values at its `U` distinct rows.
    """
    if not isinstance(grad, tf.IndexedSlices):
        return grad
    rows, position = tf.unique(grad.indices)
    values = tf.math.unsorted_segment_sum(tf.cast(grad.values, tf.float32), position,
                                          tf.shape(rows)[0])
    return tf.IndexedSlices(values, rows, grad.dense_shape)


def apply(optimizer, grads, variables, scales):
    """`w <- w - (lr c) g` for each weight, then the optimizer's step count plus one.

    Args:
        optimizer: a Keras `SGD` for which `supports` holds.
        grads: list of dense gradients, float32 or 16-bit, or `deduplicated` slices, in
            `variables`' order.
        variables: the float32 Keras variables they are the gradients of.
        scales: one float32 scalar `c` per gradient (`clip_scales`).
    """
    learning_rate = tf.cast(optimizer.learning_rate, tf.float32)
    library = native.library_for("sgd_update")
    for grad, variable, scale in zip(grads, variables, scales, strict=True):
        alpha = learning_rate * scale
        if isinstance(grad, tf.IndexedSlices):
            _subtract_rows(library, variable, grad, alpha)
        elif library is not None:
            library.psmm_resource_scaled_subtract(variable.value.handle, grad, alpha)
        else:
            variable.assign_sub(tf.cast(grad, tf.float32) * alpha)
    optimizer.iterations.assign_add(1)


def _subtract_rows(library, variable, grad, alpha):
    """`w[rows] -= alpha g` for `tf.IndexedSlices` `grad`: the native kernel's row update, or,
    as TensorFlow ops, the dense update. (TensorFlow's own `ResourceScatterSub` would set the
    variable to copy its whole buffer on every later read: sgd_update.cc.)"""
    if library is not None:
        library.psmm_resource_scaled_subtract_rows(variable.value.handle, grad.indices,
                                                   tf.cast(grad.values, tf.float32), alpha)
    else:
        variable.assign_sub(tf.convert_to_tensor(grad) * alpha)
