"""The next-word distribution of a context, over the vocabulary extended by its window's words.

The pointer copies words, not ids: a context word outside the softmax vocabulary (read by the
model as `<unk>`) can still be predicted by pointing at it. The distribution is therefore taken
over `V + L` ids: the `V` vocabulary ids, and `V + j` for the out-of-vocabulary word whose first
occurrence in the last position's window (`L` keys) is slot `j`. The vocabulary logits are
padded with very negative values up to `V + L` (zero probability) and the window's attention
is scatter-added onto these extended ids by `psmm_tf.layers.mixture_distribution`. The
`<unk>` entry keeps the softmax's mass for "some word outside the vocabulary" plus the
attention on literal `<unk>` tokens of the context.

With a neural cache (`psmm_tf.export.cache`) the slots are the last `N = max(L, W)` words: the
cache's candidates are the words that followed its `W` states, i.e. the context's last `W`
words, and an out-of-vocabulary word among them gets its extended id too. The distribution becomes
`(1 - lambda) p_model + lambda p_cache` over the `V + N` ids (`p_model` alone for an empty
context), so summing the ids `>= V` into `<unk>` gives the distribution the `score` signatures
use.
"""

import tensorflow as tf

from psmm_tf.layers import mixture_distribution, neural_cache

_PAD_LOGIT = -1e30


def last_window(values, last, window_size):
    """The `window_size` entries of each row ending at `last`, and which of them exist.

    Args:
        values: `(batch_size, T, ...)`.
        last: int32 `(batch_size,)`, the last position of each row.
        window_size: int. `L`.

    Returns:
        `(window, valid)`: `(batch_size, L, ...)` (slot `L - 1` is position `last`) and bool
        `(batch_size, L)`, False for slots before the start of the row.
    """
    positions = last[:, None] - (window_size - 1) + tf.range(window_size)[None, :]
    valid = positions >= 0
    return tf.gather(values, tf.maximum(positions, 0), batch_dims=1), valid


def next_word(outputs, words, vocab_ids, lengths, window_size, vocab_size, cache=None):
    """Next-word probabilities after the last position of each row.

    Args:
        outputs: the model's outputs for the padded context (`vocab_logits` `(B, T, V)`,
            `hidden` `(B, T, H)`, and `attention` `(B, T, T)` and `gate` `(B, T)` for models
            with a pointer).
        words: string `(B, T)`, the context's tokens as read (the keys' words).
        vocab_ids: int32 `(B, T)`, their vocabulary ids, -1 for words outside it.
        lengths: int32 `(B,)`, tokens per row (>= 1).
        window_size: int. `L`, keys the pointer of a position can reach.
        vocab_size: int. `V`.
        cache: optional `psmm_tf.evaluation.CacheSettings`: mix the neural cache in.

    Returns:
        A dict with `distribution` float32 `(B, V + N)` (rows sum to 1; `N = L`, or
        `max(L, W)` with a cache), `gate` `(B,)`, `window_words` string `(B, N)`, `window_ids`
        int32 `(B, N)` (extended ids) and `window_mass` float32 `(B, N)`: the pointer's
        probability of the word of each slot that is that word's first occurrence in the
        slots (summed over its occurrences), -1 for other slots and for words outside the
        pointer's window (the last `L` slots).
    """
    num_slots = window_size if cache is None else max(window_size, cache.window)
    last = lengths - 1
    logits = tf.gather(outputs["vocab_logits"], last, batch_dims=1)  # (B, V)
    if "attention" in outputs:
        attention = tf.gather(outputs["attention"], last, batch_dims=1)  # (B, T)
        gate = tf.gather(outputs["gate"], last, batch_dims=1)
    else:  # no pointer: all mass on the softmax
        attention = tf.zeros(tf.shape(words), logits.dtype)
        gate = tf.ones(tf.shape(last), logits.dtype)
    attention, valid = last_window(attention, last, num_slots)
    in_pointer = tf.range(num_slots)[None, :] >= num_slots - window_size
    attention = tf.where(tf.logical_and(valid, in_pointer), attention, 0.0)
    window_words, _ = last_window(words, last, num_slots)
    window_vocab_ids, _ = last_window(vocab_ids, last, num_slots)

    # same[b, i, j]: slots i and j hold the same word (both existing).
    same = tf.logical_and(tf.equal(window_words[:, :, None], window_words[:, None, :]),
                          tf.logical_and(valid[:, :, None], valid[:, None, :]))
    first = tf.argmax(tf.cast(same, tf.int32), axis=-1, output_type=tf.int32)  # (B, N)
    window_ids = tf.where(window_vocab_ids >= 0, window_vocab_ids, vocab_size + first)
    window_ids = tf.where(valid, window_ids, 0)

    padded_logits = tf.pad(logits, [[0, 0], [0, num_slots]], constant_values=_PAD_LOGIT)
    distribution = mixture_distribution(padded_logits[:, None, :], attention[:, None, :],
                                        gate[:, None], window_ids)[:, 0]
    if cache is not None:
        distribution = _with_cache(distribution, outputs["hidden"], last, window_ids, cache,
                                   num_slots)
    mass = tf.reduce_sum(tf.where(same, attention[:, None, :], 0.0), axis=-1)
    pointed = tf.reduce_any(tf.logical_and(same, in_pointer[:, None, :]), axis=-1)
    is_first = tf.logical_and(tf.logical_and(valid, pointed),
                              tf.equal(first, tf.range(num_slots)[None, :]))
    return {
        "distribution": distribution,
        "gate": gate,
        "window_words": window_words,
        "window_ids": window_ids,
        "window_mass": tf.where(is_first, mass, -1.0),
    }


def _with_cache(distribution, hidden, last, window_ids, cache, num_slots):
    """`(1 - lambda) distribution + lambda p_cache` where the last position has history
    (`neural_cache.cache_weights` and `mix`: eqs. 2 and 4 in one place).

    Slot `s` holds the word at position `last - N + 1 + s`; the cache state it follows is at
    position `last - N + s`, one of the query's `W` previous states if `s >= N - W` (Grave et
    al. eq. 2: `p_cache(w) ∝ sum_{i: x_{i+1} = w} exp(theta h_t . h_i)`).
    """
    query = tf.cast(tf.gather(hidden, last, batch_dims=1), tf.float32)  # (B, H)
    states, exists = last_window(tf.cast(hidden, tf.float32), last - 1, num_slots)
    in_cache = tf.range(num_slots)[None, :] >= num_slots - cache.window
    allowed = tf.logical_and(exists, in_cache)  # (B, N)
    weights = neural_cache.cache_weights(tf.einsum("bh,bnh->bn", query, states), allowed,
                                         cache.theta)
    batch_index = tf.broadcast_to(tf.range(tf.shape(window_ids)[0])[:, None],
                                  tf.shape(window_ids))
    p_cache = tf.tensor_scatter_nd_add(tf.zeros_like(distribution),
                                       tf.stack([batch_index, window_ids], axis=-1), weights)
    has_history = tf.reduce_any(allowed, axis=-1, keepdims=True)
    return neural_cache.mix(distribution, p_cache, has_history, cache.lam)


def top_words(result, k, id_to_word, vocab_size, window_size):
    """The `predict_next` outputs: the `k` most probable words and the pointer's favourites.

    Args:
        result: the dict of `next_word`.
        k: int32 `(B,)` in `[1, V]`, the words wanted for each row (B >= 1).
        id_to_word: a lookup table from int64 vocabulary ids to words.
        vocab_size, window_size: ints `V` and `L` (the pointer's window, not the slots `N`).

    Returns:
        A dict with `top_words` string `(B, K)`, `top_ids` int32 `(B, K)` (extended ids),
        `top_probs` float32 `(B, K)`, `gate` `(B,)`, and `pointer_words` string and
        `pointer_probs` float32 `(B, min(K, L))` ("" and 0 past the window's distinct words),
        where `K = max(k)`: row `i`'s columns from `k[i]` on are padding ("", id -1, 0).
    """
    max_k = tf.reduce_max(k)
    top_probs, top_ids = tf.math.top_k(result["distribution"], max_k)
    top_ids = tf.cast(top_ids, tf.int32)
    num_slots = tf.shape(result["window_words"])[1]
    window_slot = tf.clip_by_value(top_ids - vocab_size, 0, num_slots - 1)
    words = tf.where(top_ids < vocab_size, id_to_word.lookup(tf.cast(top_ids, tf.int64)),
                     tf.gather(result["window_words"], window_slot, batch_dims=1))
    pointer_probs, slots = tf.math.top_k(result["window_mass"], tf.minimum(max_k, window_size))
    pointer_words = tf.gather(result["window_words"], slots, batch_dims=1)
    # A row asking for fewer words than the batch's largest k gets padding past its own k.
    wanted = tf.range(max_k)[None, :] < k[:, None]
    pointed = tf.logical_and(pointer_probs >= 0.0,
                             wanted[:, :tf.shape(pointer_probs)[1]])
    return {"top_words": tf.where(wanted, words, ""), "top_ids": tf.where(wanted, top_ids, -1),
            "top_probs": tf.where(wanted, top_probs, 0.0), "gate": result["gate"],
            "pointer_words": tf.where(pointed, pointer_words, ""),
            "pointer_probs": tf.where(pointed, pointer_probs, 0.0)}
