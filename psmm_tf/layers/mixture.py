"""The pointer sentinel mixture: p(y) = g p_vocab(y) + sum_{i: x_i = y} a_i (paper eq. 3, 9).

These functions are the only place the mixture is computed. The training loss needs only the
target's probability: a gather from the vocabulary logits and a masked sum over the window,
never a `[B, T, V]` pointer tensor (paper section 2.6). `mixture_distribution` builds the full
distribution for prediction with a scatter-add of the window's attention.
"""

import numpy as np
import tensorflow as tf

# Smallest positive normal float32: the floor under probabilities before a log, so that
# log(0) (a target that never occurs in the window) stays finite and its gradient zero.
_TINY = float(np.finfo(np.float32).tiny)


def pointer_mass(attention, key_ids, targets):
    """Pointer probability of each target: sum of attention on keys holding that word (eq. 3).

    Args:
        attention: float `(batch_size, T, K)`, from `PointerSentinel`.
        key_ids: int `(batch_size, K)`, the token at each key.
        targets: int `(batch_size, T)`.

    Returns:
        float32 `(batch_size, T)`.
    """
    attention, key_ids, targets = _as_tensors(attention, key_ids, targets)
    _check_mixture_shapes(attention, key_ids, targets=targets)
    matches = tf.equal(key_ids[:, None, :], tf.cast(targets, key_ids.dtype)[:, :, None])
    return tf.reduce_sum(tf.where(matches, attention, tf.zeros_like(attention)), axis=-1)


def mixture_log_prob(vocab_logits, attention, gate, key_ids, targets):
    """Log-probability of each target under the mixture (paper eq. 3 and 9).

    `log p(y) = log(g * softmax(logits)[y] + sum_{i: x_i = y} a_i)`, computed in log space from
    the target's logit and the log-sum-exp of the row, without a `[B, T, V]` pointer tensor.

    Args:
        vocab_logits: float `(batch_size, T, V)`, logits of the vocabulary softmax.
        attention: float `(batch_size, T, K)`, pointer attention over the keys.
        gate: float `(batch_size, T)`, the sentinel's share.
        key_ids: int `(batch_size, K)`, the token at each key.
        targets: int `(batch_size, T)`, in `[0, V)`.

    Returns:
        float32 `(batch_size, T)`.
    """
    vocab_logits, attention, gate, key_ids, targets = _as_tensors(
        vocab_logits, attention, gate, key_ids, targets
    )
    _check_mixture_shapes(attention, key_ids, vocab_logits=vocab_logits, gate=gate,
                          targets=targets)
    return mixture_log_prob_from_vocab(
        vocab_log_prob(vocab_logits, targets), attention, gate, key_ids, targets
    )


def mixture_log_prob_from_vocab(target_vocab_log_prob, attention, gate, key_ids, targets):
    """`mixture_log_prob` from the target's vocabulary log-probability, however obtained.

    For softmaxes that never form full logits in training (sampled or CNN softmax, whose
    estimate of `log p_vocab(y)` comes from a sample of the vocabulary) the pointer part of the
    mixture is unchanged.

    Args:
        target_vocab_log_prob: float `(batch_size, T)`, `log p_vocab(targets)`.
        attention, gate, key_ids, targets: as for `mixture_log_prob`.

    Returns:
        float32 `(batch_size, T)`.
    """
    target_vocab_log_prob, attention, gate, key_ids, targets = _as_tensors(
        target_vocab_log_prob, attention, gate, key_ids, targets
    )
    _check_mixture_shapes(attention, key_ids, gate=gate, targets=targets)
    log_gate = tf.math.log(tf.maximum(gate, _TINY))
    log_pointer = tf.math.log(tf.maximum(pointer_mass(attention, key_ids, targets), _TINY))
    # log(g p_vocab + p_ptr) = logaddexp(log g + log p_vocab, log p_ptr)
    return tf.experimental.numpy.logaddexp(log_gate + target_vocab_log_prob, log_pointer)


def pointer_loss(attention, gate, key_ids, targets):
    """The pointer's own loss term: `-log(g + sum_{i: x_i = y} a_i)` (paper eq. 9).

    It rewards the pointer for putting its mass on the target's occurrences in the window, or,
    where the target is not there, on the sentinel.

    Args:
        attention: float `(batch_size, T, K)`.
        gate: float `(batch_size, T)`.
        key_ids: int `(batch_size, K)`.
        targets: int `(batch_size, T)`.

    Returns:
        float32 `(batch_size, T)`, non-negative.
    """
    attention, gate, key_ids, targets = _as_tensors(attention, gate, key_ids, targets)
    _check_mixture_shapes(attention, key_ids, gate=gate, targets=targets)
    total = gate + pointer_mass(attention, key_ids, targets)
    return -tf.math.log(tf.maximum(total, _TINY))


def mixture_distribution(vocab_logits, attention, gate, key_ids):
    """The full mixture distribution over the vocabulary, for prediction.

    `p = g * softmax(logits) + scatter_add(attention onto key_ids)`. Keys holding a word outside
    the softmax's vocabulary can be given ids `>= V` if `vocab_logits` is padded with very
    negative logits up to those ids.

    Args:
        vocab_logits: float `(batch_size, T, V)`.
        attention: float `(batch_size, T, K)`.
        gate: float `(batch_size, T)`.
        key_ids: int `(batch_size, K)` in `[0, V)`.

    Returns:
        float32 `(batch_size, T, V)`; each row sums to 1.
    """
    vocab_logits, attention, gate, key_ids = _as_tensors(vocab_logits, attention, gate, key_ids)
    _check_mixture_shapes(attention, key_ids, vocab_logits=vocab_logits, gate=gate)
    vocab_size = tf.shape(vocab_logits)[-1]
    key_ids = checked_ids("key_ids", key_ids, vocab_size)
    vocab_probs = tf.nn.softmax(vocab_logits, axis=-1)
    mixture = gate[..., None] * vocab_probs

    # Scatter-add a[b, t, k] into row (b, t) at column key_ids[b, k].
    shape = tf.shape(attention)
    batch_index = tf.broadcast_to(tf.range(shape[0])[:, None, None], shape)
    time_index = tf.broadcast_to(tf.range(shape[1])[None, :, None], shape)
    word_index = tf.broadcast_to(tf.cast(key_ids, tf.int32)[:, None, :], shape)
    indices = tf.stack([batch_index, time_index, word_index], axis=-1)
    return tf.tensor_scatter_nd_add(mixture, indices, attention)


def vocab_log_prob(vocab_logits, targets):
    """`log softmax(vocab_logits)[target]` from one gather and one log-sum-exp.

    Args:
        vocab_logits: float `(batch_size, T, V)`.
        targets: int `(batch_size, T)` in `[0, V)`.

    Returns:
        float32 `(batch_size, T)`.
    """
    (vocab_logits,) = _as_tensors(vocab_logits)
    targets = checked_ids("targets", targets, tf.shape(vocab_logits)[-1])
    target_logit = tf.gather(vocab_logits, targets, batch_dims=2)
    return target_logit - tf.reduce_logsumexp(vocab_logits, axis=-1)


def _as_tensors(*values):
    """Tensors, with floats promoted to float32 (or kept float64) for stable sums and logs."""
    tensors = [tf.convert_to_tensor(value) for value in values]
    wide = any(t.dtype == tf.float64 for t in tensors)
    return tuple(
        tf.cast(t, tf.float64 if wide else tf.float32) if t.dtype.is_floating else t
        for t in tensors
    )


def checked_ids(name, ids, vocab_size):
    """Asserts `0 <= ids < vocab_size` before a gather or scatter uses them.

    A GPU gather returns zeros for an out-of-range index instead of failing, so the check is an
    explicit assertion (on every device). XLA drops assertions: inputs of compiled steps are
    validated where they enter (the data pipeline and the serving signatures).
    """
    ids = tf.convert_to_tensor(ids)
    if not ids.dtype.is_integer:
        raise TypeError(f"`{name}` must be an integer tensor, got dtype {ids.dtype.name}.")
    ids = tf.cast(ids, tf.int32)
    vocab_size = tf.cast(vocab_size, tf.int32)
    with tf.control_dependencies([
        tf.debugging.assert_non_negative(ids, message=f"`{name}` holds a negative id."),
        tf.debugging.assert_less(
            ids, vocab_size, message=f"`{name}` holds an id >= the vocabulary size."
        ),
    ]):
        return tf.identity(ids)


def _check_mixture_shapes(attention, key_ids, vocab_logits=None, gate=None, targets=None):
    """Static rank and size checks with messages that name the argument."""
    named = {"attention": (attention, 3), "key_ids": (key_ids, 2)}
    if vocab_logits is not None:
        named["vocab_logits"] = (vocab_logits, 3)
    if gate is not None:
        named["gate"] = (gate, 2)
    if targets is not None:
        named["targets"] = (targets, 2)
    for name, (tensor, rank) in named.items():
        if tensor.shape.rank is not None and tensor.shape.rank != rank:
            raise ValueError(
                f"`{name}` must have rank {rank}, got shape {tensor.shape.as_list()}."
            )
    att = attention.shape
    _same(att[-1], key_ids.shape[-1], "attention's last dimension (number of keys)",
          "key_ids' last dimension")
    _same(att[0], key_ids.shape[0], "attention's batch size", "key_ids' batch size")
    for name, tensor in (("vocab_logits", vocab_logits), ("gate", gate), ("targets", targets)):
        if tensor is not None:
            _same(att[0], tensor.shape[0], "attention's batch size", f"{name}'s batch size")
            _same(att[1], tensor.shape[1], "attention's time dimension",
                  f"{name}'s time dimension")


def _same(dim_a, dim_b, what_a, what_b):
    if dim_a is not None and dim_b is not None and dim_a != dim_b:
        raise ValueError(f"{what_a} ({dim_a}) must equal {what_b} ({dim_b}).")
