"""`log softmax(z)[y]` on TensorFlow, with a backward pass of its own.

TensorFlow's fused `sparse_softmax_cross_entropy_with_logits` computes the loss and its
gradient `softmax(z) - one_hot(y)` in one kernel, which on CPU was slower than the same work
written with oneDNN's softmax (docs/results.md, "The machine's limit"). The softmax is computed
once, forward, and kept for the backward pass: the target's log-probability is the log of its
softmax entry, which is exact to float rounding while that entry is a normal number; a row
whose target's probability is below `EXACT_BELOW` takes the log-sum-exp instead. In the
training steps (inside `psmm_tf.native.enabled()`) both passes are one native CPU kernel each
(`psmm_tf/native/target_log_softmax.cc`), which also reads 16-bit logits and writes their
gradient in 16 bits without a float32 copy of either (docs/results.md, "Native kernels:
per-kernel A/B").
"""

import functools

import tensorflow as tf

from psmm_tf import native

# Below this target probability, `log softmax(z)[y]` is taken as `z_y - logsumexp(z)`: the
# log of a probability this small (a loss above 69 nats) could lose digits to subnormals.
EXACT_BELOW = 1e-30


def target_log_softmax(logits, targets, fused=None):
    """`log softmax(logits)[target]`, differentiable in `logits`, computed in float32 (float64
    for float64 logits).

    Args:
        logits: float `(..., V)`.
        targets: int `(...)` in `[0, V)` (checked by the caller).
        fused: optional bool. True computes it, forward and backward, with the native CPU
            kernels where they can be built and run and `logits` are 16-bit or float32
            (`psmm_tf.native.library_for`); False, or where they cannot, with TensorFlow ops.
            None (the default): True inside `psmm_tf.native.enabled()` (the training steps),
            else False.

    Returns:
        `(...)` float32 (float64 for float64 logits). Its gradient, in `logits`' dtype, is
        `dy (one_hot(y) - softmax(z))`.
    """
    library = native.library_for("target_log_softmax", logits.dtype, use=fused)
    if library is None:
        logits = tf.cast(logits, tf.float64 if logits.dtype == tf.float64 else tf.float32)
        row_log_prob = _ops_row_log_prob
    else:
        row_log_prob = functools.partial(_native_row_log_prob, library)
    shape = tf.shape(targets)
    flat_targets = tf.reshape(tf.cast(targets, tf.int32), [-1])

    @tf.custom_gradient
    def log_prob(logits):
        rows = tf.reshape(logits, [-1, tf.shape(logits)[-1]])  # (N, V)
        value, row_backward = row_log_prob(rows, flat_targets)

        def backward(d_value):
            return tf.reshape(row_backward(tf.reshape(d_value, [-1])), tf.shape(logits))

        return tf.reshape(value, shape), backward

    return log_prob(logits)


def _ops_row_log_prob(rows, targets):
    """`(value, backward)` of `(N, V)` rows and `(N,)` targets as TensorFlow ops: the softmax
    once, forward; `backward` maps `d value (N,)` to the rows' gradient."""
    probs = tf.nn.softmax(rows)
    target_prob = tf.gather(probs, targets, axis=1, batch_dims=1)
    # Rows whose target is (nearly) out of float range: the log-sum-exp, exactly. A NaN
    # probability fails the comparison and stays NaN.
    exact = tf.where(target_prob < EXACT_BELOW)
    exact_rows = tf.gather_nd(rows, exact)  # (k, V), k usually 0
    exact_logit = tf.gather(exact_rows, tf.gather_nd(targets, exact), axis=1, batch_dims=1)
    exact_value = exact_logit - tf.reduce_logsumexp(exact_rows, axis=-1)
    value = tf.tensor_scatter_nd_update(tf.math.log(target_prob), exact, exact_value)

    def backward(d_value):
        # dy one_hot(y) - dy softmax(z): the softmax scaled, dy added at each target.
        index = tf.stack([tf.range(tf.shape(targets)[0]), targets], axis=-1)
        return tf.tensor_scatter_nd_add(probs * -d_value[:, None], index, d_value)

    return value, backward


def _native_row_log_prob(library, rows, targets):
    """`_ops_row_log_prob` with the native kernels: the row's maximum and the inverse of its
    sum of exponentials forward, kept for the backward pass, which recomputes the softmax."""
    value, row_max, inverse_sum = library.psmm_target_log_softmax(rows, targets)

    def backward(d_value):
        return library.psmm_target_log_softmax_grad(rows, targets, row_max, inverse_sum,
                                                    tf.cast(d_value, tf.float32))

    return value, backward
