"""The continuous (neural) cache of Grave, Joulin and Usunier (2017), as plain functions.

    p_cache(w | h_1..t) ∝ sum_{i < t, x_{i+1} = w} exp(theta h_t . h_i)       (Grave et al. eq. 2)
    p(w) = (1 - lambda) p_model(w) + lambda p_cache(w)                         (eq. 4)

The cache holds the last `window` hidden states of the model's top layer, each with the word that
followed it. It needs no training. A position with no history yet (the first token of a text)
has no cache distribution and keeps `p_model`: the cache is used exactly from the second token on.
"""

import keras
from keras import ops

from psmm_tf.layers.pointer_sentinel import window_band

_TINY = 1e-30


def empty_cache(batch_size, window, hidden_dim, dtype="float32"):
    """A cache with no entries: hidden `(B, W, D)`, next_ids `(B, W)`, mask `(B, W)`."""
    return {
        "hidden": ops.zeros((batch_size, window, hidden_dim), dtype),
        "next_ids": ops.zeros((batch_size, window), "int32"),
        "mask": ops.zeros((batch_size, window), "bool"),
    }


def cache_keys(cache, hidden, targets, token_mask):
    """The cache's entries followed by this chunk's states, each with the word after it.

    Within a chunk the word that follows position i's state is `targets[:, i]`.

    Returns:
        dict of hidden `(B, W + T, D)`, next_ids `(B, W + T)`, mask `(B, W + T)`.
    """
    hidden_dtype = keras.backend.standardize_dtype(hidden.dtype)
    return {
        "hidden": ops.concatenate([ops.cast(cache["hidden"], hidden_dtype), hidden], axis=1),
        "next_ids": ops.concatenate([ops.cast(cache["next_ids"], "int32"),
                                     ops.cast(targets, "int32")], axis=1),
        "mask": ops.concatenate([ops.cast(cache["mask"], "bool"),
                                 ops.cast(token_mask, "bool")], axis=1),
    }


def cache_weights(dots, allowed, theta):
    """Eq. 2's weights over the previous states: `softmax(theta h_t . h_i)` over the allowed
    ones, 0 elsewhere (all 0 where none is allowed).

    Args:
        dots: float32 `(..., K)`, `h_t . h_i` for each previous state `i`.
        allowed: bool, broadcastable to `dots`: the states in the cache's window.
        theta: float, or float32 broadcastable to `dots` (several thetas at once).
    """
    scores = ops.where(allowed, theta * dots, -1e30)
    return ops.where(allowed, ops.softmax(scores, axis=-1), 0.0)


def mix(p_model, p_cache, has_history, lam):
    """Eq. 4, `(1 - lambda) p_model + lambda p_cache`, or `p_model` where there is no history.

    Args:
        p_model: float32 `(...)`. p_cache: float32 broadcastable to it. has_history: bool
            broadcastable to it. lam: float or float32 tensor broadcastable to it.
    """
    lam = ops.cast(lam, "float32")
    return ops.where(has_history, (1.0 - lam) * p_model + lam * p_cache, p_model)


def cache_target_probs(hidden, keys, targets, thetas, window):
    """`p_cache(target)` for each theta, and whether each position has any history.

    Args:
        hidden: float `(B, T, D)`, the queries `h_t`.
        keys: from `cache_keys`, with `W` entries before the `T` of this chunk.
        targets: int `(B, T)`.
        thetas: float `(G,)`, the flatness parameters to evaluate at once.
        window: int. How many previous states a position sees.

    Returns:
        `(probs, has_history)`: float32 `(G, B, T)` and bool `(B, T)`.
    """
    hidden = ops.cast(hidden, "float32")
    num_queries = ops.shape(hidden)[1]
    num_before = ops.shape(keys["hidden"])[1] - num_queries
    # Strictly earlier states: a band of width window + 1 ending at the query, minus itself.
    band = window_band(num_queries, num_before, window + 1)
    own = window_band(num_queries, num_before, 1)
    allowed = ops.logical_and(ops.logical_and(band, ops.logical_not(own))[None],
                              ops.cast(keys["mask"], "bool")[:, None, :])  # [B, T, K]
    dots = ops.einsum("btd,bkd->btk", hidden, ops.cast(keys["hidden"], "float32"))
    matches = ops.logical_and(allowed, ops.equal(ops.cast(keys["next_ids"], "int32")[:, None, :],
                                                 ops.cast(targets, "int32")[:, :, None]))
    weights = cache_weights(dots[None], allowed[None],
                            ops.cast(thetas, "float32")[:, None, None, None])  # [G, B, T, K]
    probs = ops.sum(ops.where(matches[None], weights, 0.0), axis=-1)
    return probs, ops.any(allowed, axis=-1)


def interpolate(model_log_prob, cache_prob, has_history, lam):
    """`log((1 - lambda) p_model + lambda p_cache)`, or `log p_model` where there is no history.

    Args:
        model_log_prob: float `(..., B, T)`. cache_prob: float, broadcastable to it.
        has_history: bool `(B, T)`. lam: float or tensor broadcastable to the result.
    """
    model_log_prob = ops.cast(model_log_prob, "float32")
    mixed = ops.log(ops.maximum(mix(ops.exp(model_log_prob), cache_prob, True, lam), _TINY))
    return ops.where(has_history, mixed, model_log_prob)


def updated_cache(keys, window):
    """The last `window` entries of `cache_keys(...)`: the cache for the next chunk."""
    size = ops.shape(keys["next_ids"])[1]
    return {name: value[:, size - window:] for name, value in keys.items()}
