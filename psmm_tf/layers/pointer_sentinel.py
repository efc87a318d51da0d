"""The pointer network with a sentinel (Merity et al. 2016, section 2.3-2.4)."""

import math

import keras
from keras import ops

from psmm_tf.layers import shapes
from psmm_tf.layers.dense import affine


class WindowedAttention(keras.layers.Layer):
    """The windowed attention both pointers share: a query `q = tanh(W h_t + b)` (paper eq. 4)
    scoring the keys of its window, `z_i = q . h_i` (eq. 5).

    Keys are `concat([memory, hidden], axis=1)`: `M` carried hidden states (zero or more, e.g.
    the previous window's last states, or the context part of a recomputed window) followed by
    the `T` query positions themselves. Query `t` attends the keys `M + t - L + 1 .. M + t` (its
    own state included, never a later one); keys whose `memory_mask` is False (empty slots
    before the start of the text) are never attended. Subclasses turn the scores into
    `(attention, gate)`: `PointerSentinel` (a sentinel inside the softmax) and `PointerSoftmax`
    (a switch on the state).

    Args:
        window_size: int >= 1. `L`: the most recent hidden states a position may point to, its
            own included.
        kernel_initializer: initializer of the query kernel `W`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Example:
    ```python
    import numpy as np
    from psmm_tf.layers import PointerSentinel

    # Both pointers are WindowedAttention subclasses: scores of each query's window, eq. 5.
    pointer = PointerSentinel(window_size=3)
    hidden = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    pointer.build(hidden.shape)
    query, scores, allowed = pointer.window_scores(hidden)  # (2, 5, 8), (2, 5, 5), (2, 5, 5)
    ```
    """

    def __init__(self, window_size, kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if not isinstance(window_size, int) or isinstance(window_size, bool) or window_size < 1:
            raise ValueError(f"window_size must be an integer >= 1, got {window_size!r}.")
        self.window_size = window_size
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def _build_query(self, hidden_shape, bias_initializer="zeros"):
        """Creates `W` and `b` of the query (eq. 4); returns the hidden size D."""
        dim = hidden_shape[-1]
        if dim is None:
            raise ValueError(f"The last dimension of `hidden` must be known, got {hidden_shape}.")
        self.query_kernel = self.add_weight(
            name="query_kernel", shape=(dim, dim), initializer=self.kernel_initializer
        )
        self.query_bias = self.add_weight(name="query_bias", shape=(dim,),
                                          initializer=bias_initializer)
        return dim

    def window_scores(self, hidden, memory=None, memory_mask=None):
        """The query and its scores over the window.

        Returns:
            `(query, scores, allowed)`: the query `(B, T, D)`, scores `q . h_i` (eq. 5) of shape
            `(B, T, M + T)` with a very negative value where not allowed, and the bool
            `allowed` `(B, T, M + T)`: inside the window and not masked.
        """
        shapes.check_rank("hidden", hidden, 3)
        keys, key_mask = self._keys(hidden, memory, memory_mask)
        num_queries = ops.shape(hidden)[1]
        num_memory = ops.shape(keys)[1] - num_queries

        query = self.query(hidden)
        score_dtype = query.dtype
        key_scores = ops.einsum("btd,bkd->btk", query, ops.cast(keys, score_dtype))

        allowed = window_band(num_queries, num_memory, self.window_size)  # [T, M + T]
        allowed = ops.logical_and(allowed[None, :, :], key_mask[:, None, :])
        # A finite very negative score gives exactly zero weight after the softmax, and unlike
        # -inf keeps the gradient of masked scores finite (zero).
        key_scores = ops.where(allowed, key_scores, ops.cast(-1e30, score_dtype))
        return query, key_scores, allowed

    def query(self, hidden):
        """Paper eq. 4: `q = tanh(W h_t + b)`, `(B, T, D)`, returned in at least float32 (under a
        16-bit policy computed in 16 bits and cast: the scores of eq. 5 are taken in float32)."""
        score_dtype = "float64" if hidden.dtype == "float64" else "float32"
        query = ops.tanh(affine(hidden, self.query_kernel, self.query_bias))
        return ops.cast(query, score_dtype)

    def _keys(self, hidden, memory, memory_mask):
        """Returns keys [B, M + T, D] and their validity [B, M + T]."""
        batch_size, num_queries = ops.shape(hidden)[0], ops.shape(hidden)[1]
        hidden_mask = ops.ones((batch_size, num_queries), dtype="bool")
        if memory is None:
            if memory_mask is not None:
                raise ValueError("`memory_mask` was given without `memory`.")
            return hidden, hidden_mask
        shapes.check_rank("memory", memory, 3)
        shapes.check_same_static_dim("memory", memory, 2, "hidden", hidden, 2)
        shapes.check_same_static_dim("memory", memory, 0, "hidden", hidden, 0)
        if memory_mask is None:
            memory_mask = ops.ones(ops.shape(memory)[:2], dtype="bool")
        else:
            shapes.check_rank("memory_mask", memory_mask, 2)
            shapes.check_same_static_dim("memory_mask", memory_mask, 1, "memory", memory, 1)
            memory_mask = ops.cast(memory_mask, "bool")
        keys = ops.concatenate([ops.cast(memory, hidden.dtype), hidden], axis=1)
        return keys, ops.concatenate([memory_mask, hidden_mask], axis=1)

    def compute_output_shape(self, hidden_shape, memory_shape=None, memory_mask_shape=None):
        num_memory = 0 if memory_shape is None else memory_shape[1]
        num_keys = None if num_memory is None or hidden_shape[1] is None else (
            num_memory + hidden_shape[1]
        )
        return (hidden_shape[0], hidden_shape[1], num_keys), (hidden_shape[0], hidden_shape[1])

    def get_config(self):
        config = super().get_config()
        config.update({"window_size": self.window_size,
                       "kernel_initializer": keras.initializers.serialize(
                           self.kernel_initializer)})
        return config


@keras.saving.register_keras_serializable(package="psmm_tf")
class PointerSentinel(WindowedAttention):
    """Attention over the last `window_size` hidden states plus a learned sentinel.

    For each position t the layer forms a query `q = tanh(W h_t + b)` (paper eq. 4), scores
    the keys in its window `z_i = q . h_i` (eq. 5), adds the sentinel's score `q . s`, and takes
    one softmax over `[z; q . s]` (eq. 7). The sentinel's share of that softmax is the gate `g`
    (eq. 8): how much of the probability mass goes to the vocabulary softmax. The remaining mass
    `a_i` is spread over the window and is copied onto the word at each key (eq. 3).

    Keys and windows are `WindowedAttention`'s (the query and eq. 5 live there). Only `W`, `b`
    and `s` are parameters (`D^2 + 2 D`).

    Args:
        window_size: int. Number of most recent hidden states a position may point to (`L` in
            the paper), its own state included. Must be >= 1.
        kernel_initializer: initializer of the query kernel `W`.
        sentinel_initializer: initializer of the sentinel vector `s`.
        initial_gate: optional float in (0, 1). None (the paper's): `b = 0` and `s` from
            `sentinel_initializer`, so every score starts near 0 and the gate near
            `1 / (L + 1)`: the window takes almost all the mass before the pointer can point.
            A value `g0` starts the gate near `g0` instead: `b = 0.5` for every unit and `s`
            (less its mean) shifted by `log(g0 L / (1 - g0)) / (D tanh(0.5))` in every unit, so
            `q . s` starts at the score that gives the sentinel `g0` of `L` zero-score keys.
        gate_calibration: optional pair `(scale, bias)` of floats, `scale >= 0`. None (the
            paper's): the gate is eq. 8's. A pair replaces the gate's logit
            `l = q . s - log sum_i exp(z_i)` by `scale * l + bias` (Platt scaling) and keeps the
            window's attention shape: `g' = sigmoid(scale * l + bias)`, `a'_i = (1 - g') a_i /
            (1 - g)`. A gate trained on the training text is overconfident on new text; the
            pair is fitted on held-out text after training
            (`psmm_tf.evaluation.gate_calibration`), never trained.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        hidden: float tensor of shape `(batch_size, T, D)`, the queries and the newest keys.
        memory: optional float tensor `(batch_size, M, D)`: older keys. None means `M = 0`.
        memory_mask: optional bool tensor `(batch_size, M)`; False marks an empty memory slot.
            None means all slots are valid.

    Returns:
        A tuple `(attention, gate)`: `attention` of shape `(batch_size, T, M + T)`, zero outside
        each position's window, and `gate` of shape `(batch_size, T)`, with
        `attention.sum(-1) + gate == 1`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.layers import PointerSentinel

    pointer = PointerSentinel(window_size=100)
    hidden = np.random.default_rng(0).normal(size=(4, 35, 650)).astype("float32")
    attention, gate = pointer(hidden)  # (4, 35, 35), (4, 35); attention.sum(-1) + gate == 1
    ```

    References:
        - [Merity et al., 2016](https://arxiv.org/abs/1609.07843)
    """

    # Its parameters, each an attribute of the layer: W and b of eq. 4, s of eq. 7.
    WEIGHT_NAMES = ("query_kernel", "query_bias", "sentinel")

    def __init__(
        self,
        window_size,
        kernel_initializer="glorot_uniform",
        sentinel_initializer="glorot_uniform",
        initial_gate=None,
        gate_calibration=None,
        **kwargs,
    ):
        super().__init__(window_size, kernel_initializer=kernel_initializer, **kwargs)
        if initial_gate is not None and not 0.0 < initial_gate < 1.0:
            raise ValueError(f"initial_gate must be in (0, 1) or None, got {initial_gate!r}.")
        self.initial_gate = initial_gate
        self.gate_calibration = check_gate_calibration(gate_calibration)
        self.sentinel_initializer = keras.initializers.get(sentinel_initializer)

    def build(self, hidden_shape, memory_shape=None, memory_mask_shape=None):
        dim = self._build_query(hidden_shape, "zeros" if self.initial_gate is None else
                                keras.initializers.Constant(_INITIAL_QUERY_BIAS))
        # The sentinel is a key like any other, so it is initialised like the query kernel's
        # columns; (1, D) keeps glorot's fan computation meaningful.
        self.sentinel = self.add_weight(
            name="sentinel", shape=(dim,), initializer=self._sentinel_init
        )

    def _sentinel_init(self, shape, dtype=None):
        noise = ops.reshape(self.sentinel_initializer((1, shape[0]), dtype=dtype), shape)
        if self.initial_gate is None:
            return noise
        # q starts near tanh(0.5) in every unit; q . s = score gives the sentinel g0 of L keys
        # scoring 0: g0 = e^score / (e^score + L) (eq. 7-8).
        # The noise loses its mean, which would shift q . s by a random amount.
        score = math.log(self.initial_gate * self.window_size / (1.0 - self.initial_gate))
        return noise - ops.mean(noise) + score / (shape[0] * math.tanh(_INITIAL_QUERY_BIAS))

    def call(self, hidden, memory=None, memory_mask=None):
        query, key_scores, allowed = self.window_scores(hidden, memory, memory_mask)
        sentinel_score = ops.einsum("btd,d->bt", query, ops.cast(self.sentinel, query.dtype))
        zero = ops.cast(0.0, query.dtype)
        if self.gate_calibration is None:
            # Eq. 7: one softmax over [z; q . s]; the sentinel's share is the gate g (eq. 8).
            scores = ops.concatenate([key_scores, sentinel_score[..., None]], axis=-1)
            weights = ops.softmax(scores, axis=-1)
            return ops.where(allowed, weights[..., :-1], zero), weights[..., -1]
        # The same softmax split in two: g = sigmoid(l), l = q . s - log sum_i exp(z_i), and the
        # window's share (1 - g) spread as softmax(z); the calibrated logit replaces l.
        scale, bias = self.gate_calibration
        logit = sentinel_score - ops.logsumexp(key_scores, axis=-1)
        logit = ops.cast(scale, logit.dtype) * logit + ops.cast(bias, logit.dtype)
        window_share = ops.sigmoid(-logit)
        attention = ops.softmax(key_scores, axis=-1) * window_share[..., None]
        return ops.where(allowed, attention, zero), ops.sigmoid(logit)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "sentinel_initializer": keras.initializers.serialize(self.sentinel_initializer),
                "initial_gate": self.initial_gate,
                "gate_calibration": None if self.gate_calibration is None
                else list(self.gate_calibration),
            }
        )
        return config


# The query bias that `initial_gate` starts from: tanh(0.5) = 0.46, far from saturation.
_INITIAL_QUERY_BIAS = 0.5


def check_gate_calibration(gate_calibration):
    """`gate_calibration` as a tuple `(scale, bias)` of floats, or None.

    Raises:
        ValueError: not None nor a pair of finite numbers with `scale >= 0`.
    """
    if gate_calibration is None:
        return None
    try:
        scale, bias = (float(value) for value in gate_calibration)
    except (TypeError, ValueError):
        raise ValueError("gate_calibration must be None or a pair (scale, bias) of numbers, "
                         f"got {gate_calibration!r}.") from None
    if not (math.isfinite(scale) and math.isfinite(bias) and scale >= 0.0):
        raise ValueError("gate_calibration must be a pair (scale, bias) of finite numbers with "
                         f"scale >= 0, got {gate_calibration!r}.")
    return scale, bias


def window_band(num_queries, num_memory, window_size):
    """Which keys each query may attend: a band of width `window_size` ending at itself.

    Args:
        num_queries: int or scalar tensor. `T`, the number of query positions.
        num_memory: int or scalar tensor. `M`, the number of memory keys before them.
        window_size: int. `L`.

    Returns:
        Bool tensor of shape `(T, M + T)`: True where `M + t - L + 1 <= k <= M + t`.
    """
    query_position = ops.arange(num_queries)[:, None] + num_memory
    key_position = ops.arange(num_memory + num_queries)[None, :]
    offset = query_position - key_position
    return ops.logical_and(offset >= 0, offset < window_size)
