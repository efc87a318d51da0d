"""`log softmax(z)[y]` on TensorFlow, with a backward pass of its own.

TensorFlow's fused `sparse_softmax_cross_entropy_with_logits` computes the loss and its
gradient `softmax(z) - one_hot(y)` in one kernel, but on CPU that kernel took 1.8 times as long
as the same work written as the row's log-sum-exp (forward) and oneDNN's softmax (backward):
19.8 against 11.0 ms for `(700, 10000)` logits, forward and backward, on the
2-core EPYC of docs/results.md ("The machine's limit"). Only the target's log-probability is
taken forward; the softmax is computed in the backward pass, where it is needed.
"""

import tensorflow as tf


def target_log_softmax(logits, targets):
    """`log softmax(logits)[target]`, differentiable in `logits`.

    Args:
        logits: float `(..., V)`.
        targets: int `(...)` in `[0, V)` (checked by the caller).

    Returns:
        `(...)`, in `logits`' dtype. Its gradient is `dy (one_hot(y) - softmax(z))`.
    """
    shape = tf.shape(targets)
    vocab_size = tf.shape(logits)[-1]

    @tf.custom_gradient
    def log_prob(logits):
        rows = tf.reshape(logits, [-1, vocab_size])  # (N, V)
        flat_targets = tf.reshape(tf.cast(targets, tf.int32), [-1])
        target_logit = tf.gather(rows, flat_targets, axis=1, batch_dims=1)
        value = tf.reshape(target_logit - tf.reduce_logsumexp(rows, axis=-1), shape)

        def backward(d_value):
            d_rows = tf.reshape(d_value, [-1])
            # dy one_hot(y) - dy softmax(z): the softmax scaled, dy added at each target.
            grad = tf.nn.softmax(rows) * -d_rows[:, None]
            index = tf.stack([tf.range(tf.shape(flat_targets)[0]), flat_targets], axis=-1)
            grad = tf.tensor_scatter_nd_add(grad, index, d_rows)
            return tf.reshape(grad, tf.shape(logits))

        return value, backward

    return log_prob(logits)
