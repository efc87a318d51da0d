"""The pointer sentinel mixture: p(y) = g p_vocab(y) + sum_{i: x_i = y} a_i (paper eq. 3, 9).

These functions are the only place the mixture is computed. The training loss needs only the
target's probability: a gather from the vocabulary logits and a masked sum over the window,
never a `[B, T, V]` pointer tensor (paper section 2.6). `mixture_distribution` builds the full
distribution for prediction with a scatter-add of the window's attention.
"""

import keras
import numpy as np
from keras import ops

from psmm_tf.compiled import is_traced

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
    matches = ops.equal(key_ids[:, None, :], ops.cast(targets, key_ids.dtype)[:, :, None])
    return ops.sum(ops.where(matches, attention, ops.zeros_like(attention)), axis=-1)


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
    log_gate = ops.log(ops.maximum(gate, _TINY))
    log_pointer = ops.log(ops.maximum(pointer_mass(attention, key_ids, targets), _TINY))
    # log(g p_vocab + p_ptr) = logaddexp(log g + log p_vocab, log p_ptr), as a log-sum-exp of
    # the pair: keras.ops.logaddexp computes in float32 on JAX whatever the inputs' dtype.
    terms = ops.stack([log_gate + target_vocab_log_prob, log_pointer], axis=-1)
    return ops.logsumexp(terms, axis=-1)


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
    return -ops.log(ops.maximum(total, _TINY))


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
    vocab_size = ops.shape(vocab_logits)[-1]
    key_ids = checked_ids("key_ids", key_ids, vocab_size)
    vocab_probs = ops.softmax(vocab_logits, axis=-1)
    mixture = gate[..., None] * vocab_probs

    # Scatter-add a[b, t, k] into row (b, t) at column key_ids[b, k]; repeated ids add up.
    shape = ops.shape(attention)
    batch_index = ops.broadcast_to(ops.arange(shape[0], dtype="int32")[:, None, None], shape)
    time_index = ops.broadcast_to(ops.arange(shape[1], dtype="int32")[None, :, None], shape)
    word_index = ops.broadcast_to(key_ids[:, None, :], shape)
    indices = ops.reshape(ops.stack([batch_index, time_index, word_index], axis=-1), (-1, 3))
    return ops.scatter_update(mixture, indices, ops.reshape(attention, (-1,)), reduction="add")


def vocab_log_prob(vocab_logits, targets):
    """`log softmax(vocab_logits)[target]`.

    The target's logit less the row's log-sum-exp; on TensorFlow with a backward pass of its
    own, `softmax - one_hot` from one softmax (`target_log_softmax_tf`: faster there than the
    fused sparse cross-entropy and than the automatic gradient; docs/design_notes.md, "Mixture
    in log space"), on JAX with `softmax - one_hot` as one elementwise pass
    (`target_log_softmax_jax`: no scatter-add of the gather's gradient).

    Args:
        vocab_logits: float `(batch_size, T, V)`.
        targets: int `(batch_size, T)` in `[0, V)`.

    Returns:
        float32 `(batch_size, T)`.
    """
    on_tensorflow = keras.backend.backend() == "tensorflow"
    # On TensorFlow 16-bit logits as they are (the native kernel reads them, the ops path
    # casts); elsewhere in float32.
    vocab_logits = (ops.convert_to_tensor(vocab_logits) if on_tensorflow
                    else _as_tensors(vocab_logits)[0])
    targets = checked_ids("targets", targets, ops.shape(vocab_logits)[-1])
    if on_tensorflow:
        from psmm_tf.layers.target_log_softmax_tf import target_log_softmax

        return target_log_softmax(vocab_logits, targets)
    if keras.backend.backend() == "jax":
        from psmm_tf.layers.target_log_softmax_jax import target_log_softmax

        return target_log_softmax(vocab_logits, targets)
    target_logit = ops.take_along_axis(vocab_logits, targets[..., None], axis=-1)[..., 0]
    return target_logit - ops.logsumexp(vocab_logits, axis=-1)


def _as_tensors(*values):
    """Tensors, with floats promoted to float32 (or kept float64) for stable sums and logs."""
    tensors = [ops.convert_to_tensor(value) for value in values]
    dtypes = [keras.backend.standardize_dtype(t.dtype) for t in tensors]
    float_dtype = "float64" if "float64" in dtypes else "float32"
    return tuple(
        ops.cast(t, float_dtype) if "float" in dtype else t
        for t, dtype in zip(tensors, dtypes, strict=True)
    )


def checked_ids(name, ids, vocab_size):
    """`ids` as int32, checked to lie in `[0, vocab_size)` when their values are known.

    A GPU gather returns zeros for an out-of-range index instead of failing, so eager ids (NumPy
    arrays, eager tensors) are checked here, with a ValueError naming the argument. Traced ids
    (a TF graph or XLA tensor, a JAX tracer) cannot be checked at run time by compiled code:
    inputs of compiled steps are validated where they enter (the data pipeline and the serving
    signatures).

    Args:
        name: str. The argument's name, for the error message.
        ids: integer tensor or array.
        vocab_size: int or scalar tensor.

    Returns:
        int32 tensor of the same shape.

    Raises:
        TypeError: `ids` does not have an integer dtype.
        ValueError: a concrete id is negative or `>= vocab_size`.
    """
    ids = ops.convert_to_tensor(ids)
    dtype = keras.backend.standardize_dtype(ids.dtype)
    if "int" not in dtype:
        raise TypeError(f"`{name}` must be an integer tensor, got dtype {dtype}.")
    ids = ops.cast(ids, "int32")
    values = _concrete(ids)
    if values is None or values.size == 0:
        return ids
    if values.min() < 0:
        raise ValueError(f"`{name}` holds a negative id: {values.min()}")
    size = vocab_size if isinstance(vocab_size, int) else _concrete(vocab_size)
    if size is not None and values.max() >= int(size):
        raise ValueError(
            f"`{name}` holds an id >= the vocabulary size ({int(size)}): {values.max()}"
        )
    return ids


def _concrete(tensor):
    """The NumPy value of `tensor`, or None when it is symbolic (a Keras functional input, or
    being traced by `tf.function` or `jax.jit`)."""
    if isinstance(tensor, keras.KerasTensor) or is_traced(tensor):
        return None
    return np.asarray(ops.convert_to_numpy(tensor))


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
        if len(ops.shape(tensor)) != rank:
            raise ValueError(
                f"`{name}` must have rank {rank}, got shape {_static_shape(tensor)}."
            )
    att = ops.shape(attention)
    key_shape = ops.shape(key_ids)
    _same(att[-1], key_shape[-1], "attention's last dimension (number of keys)",
          "key_ids' last dimension")
    _same(att[0], key_shape[0], "attention's batch size", "key_ids' batch size")
    for name, tensor in (("vocab_logits", vocab_logits), ("gate", gate), ("targets", targets)):
        if tensor is not None:
            shape = ops.shape(tensor)
            _same(att[0], shape[0], "attention's batch size", f"{name}'s batch size")
            _same(att[1], shape[1], "attention's time dimension",
                  f"{name}'s time dimension")


def _static_shape(tensor):
    """The shape as a list, None for the dimensions known only at run time."""
    return [dim if isinstance(dim, int) else None for dim in ops.shape(tensor)]


def _same(dim_a, dim_b, what_a, what_b):
    """Static dimensions (ints; None where unknown) must agree where both are known."""
    if isinstance(dim_a, int) and isinstance(dim_b, int) and dim_a != dim_b:
        raise ValueError(f"{what_a} ({dim_a}) must equal {what_b} ({dim_b}).")
