"""The neural cache (Grave et al. 2017) in the serving graph: settings, scores, carried state.

An export with a cache serves `p = (1 - lambda) p_model + lambda p_cache` (Grave et al. eq. 4)
instead of the model's own `p_model`, with the functions of `psmm_tf.layers.neural_cache`, as
`psmm_tf.evaluation.NeuralCache` computes it in evaluation. The cache holds the last `W` (the cache
window) top-layer hidden states of the text, each with the token that followed it; the stream
signatures carry it as three more state tensors, inputs and outputs under the same names:

- `cache_hidden` float32 `(B, W, H)`: the states, oldest first;
- `cache_ids` int32 `(B, W)`: the token that followed each state;
- `cache_mask` bool `(B, W)`: which entries exist (False before the start of the text).

A text's first token has no history and keeps `p_model`; from its second token on the cache is
applied exactly (no warm-up, nothing approximated), so scoring in pieces equals scoring whole.
"""

import json

import tensorflow as tf

from psmm_tf.export import CACHE_STATE_NAMES
from psmm_tf.layers import neural_cache

# The settings of an export's cache, in its `assets.extra/`.
SETTINGS_FILE = "neural_cache.json"


def settings_json(settings):
    """The JSON of `SETTINGS_FILE` for `settings` (a `psmm_tf.evaluation.CacheSettings`)."""
    return json.dumps({
        "window": settings.window, "theta": settings.theta, "lambda": settings.lam,
        "state": list(CACHE_STATE_NAMES),
        "equation": "p = (1 - lambda) p_model + lambda p_cache, "
                    "p_cache(w) ∝ sum_{i in the last window states, x_{i+1} = w} "
                    "exp(theta h_t . h_i) (Grave et al. 2017)",
    }, indent=2, ensure_ascii=False)


def state_shapes(batch_size, window, hidden_dim):
    """`{name: (shape, meaning)}` of the cache state inputs, for `validation.shape_check`."""
    return {
        "cache_hidden": ([batch_size, window, hidden_dim],
                         f"[batch_size, cache_window={window}, hidden_dim={hidden_dim}]"),
        "cache_ids": ([batch_size, window], f"[batch_size, cache_window={window}]"),
        "cache_mask": ([batch_size, window], f"[batch_size, cache_window={window}]"),
    }


def zero_state(batch_size, window, hidden_dim):
    """The cache state of `batch_size` fresh texts: `cache_hidden` `(B, W, H)` zeros,
    `cache_ids` `(B, W)` zeros and `cache_mask` `(B, W)` False."""
    return {
        "cache_hidden": tf.zeros([batch_size, window, hidden_dim]),
        "cache_ids": tf.zeros([batch_size, window], tf.int32),
        "cache_mask": tf.zeros([batch_size, window], tf.bool),
    }


def cached_log_probs(settings, model_log_probs, hidden, token_ids, lengths, state):
    """The cache-interpolated log-probabilities of a padded batch, and the next cache state.

    Args:
        settings: `psmm_tf.evaluation.CacheSettings`.
        model_log_probs: float32 `(B, T)`, `log p_model` of `token_ids`.
        hidden: float `(B, T, H)`, the top-layer state that predicts each of `token_ids`.
        token_ids: int32 `(B, T)`, valid ids (0 in the padding).
        lengths: int32 `(B,)` in `[1, T]`.
        state: dict with the `CACHE_STATE_NAMES` tensors.

    Returns:
        `(log_probs, new_state)`: float32 `(B, T)` (padding holds no meaning; mask it), and
        the cache state after each row's last token.
    """
    mask = tf.sequence_mask(lengths, tf.shape(token_ids)[1])
    cache = {"hidden": state["cache_hidden"], "next_ids": state["cache_ids"],
             "mask": state["cache_mask"]}
    keys = neural_cache.cache_keys(cache, hidden, token_ids, mask)
    probs, has_history = neural_cache.cache_target_probs(
        hidden, keys, token_ids, tf.constant([settings.theta], tf.float32), settings.window)
    log_probs = neural_cache.interpolate(model_log_probs, probs[0], has_history, settings.lam)
    # Keys are the W old entries then the T new ones; a padded row keeps the W entries ending at
    # its own last token (as the pointer's memory does), not padding.
    slots = lengths[:, None] + tf.range(settings.window)[None, :]
    new_state = {name: tf.gather(keys[key], slots, batch_dims=1) for name, key in zip(
        CACHE_STATE_NAMES, ("hidden", "next_ids", "mask"), strict=True)}
    new_state["cache_hidden"] = tf.cast(new_state["cache_hidden"], tf.float32)
    return log_probs, new_state
