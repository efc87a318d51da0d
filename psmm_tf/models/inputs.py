"""Checks of a language model's inputs where they enter, on concrete (NumPy-convertible) values.

Compiled functions cannot raise on values (XLA, `jax.jit`), so ids out of range or a state of the
wrong shape are refused here, before a model runs: by `LanguageModel.score_with_state` (and
`score`) and by any caller that feeds a model outside the package's tf.data pipeline and serving
signatures (which check the same things in TensorFlow).
"""

import numpy as np
from keras import ops

from psmm_tf.data.spelling import NUM_CHARACTER_IDS


def validate_inputs(model, token_ids, target_ids=None, padding_mask=None, state=None,
                    memory=None, token_chars=None):
    """Checks and converts a language model's inputs; raises ValueError naming the bad one.

    Args:
        model: a `psmm_tf.models.LanguageModel` (or a model with its `vocab_size`,
            `hidden_dim`, `num_layers` and `memory_size`).
        token_ids: int array-like `(batch_size, T)` in `[0, vocab_size)`.
        target_ids: optional int array-like `(batch_size, T)` in `[0, vocab_size)` where
            `padding_mask` is True (padding may hold any id).
        padding_mask: optional bool array-like `(batch_size, T)` (or numbers, all 0 or 1); all
            True when None.
        state: optional tuple of `num_layers` pairs `(h, c)`, each `(batch_size, hidden_dim)`,
            finite.
        memory: optional dict with `hidden` `(batch_size, M, hidden_dim)` (finite), `token_ids`
            `(batch_size, M)` in range where `mask`, and `mask` `(batch_size, M)`,
            `M = model.memory_size`.
        token_chars: optional int array-like `(batch_size, T, max_word_length)` of character
            ids in `[0, NUM_CHARACTER_IDS)`, for a model with `input_embedding="chars"`.

    Returns:
        A dict of NumPy arrays: `token_ids`, `target_ids` (int32; None if not given),
        `padding_mask` (bool), `state` (a tuple of pairs of float32 arrays, or None) and
        `memory` (a dict, or None), `token_chars` (int32, or None).
    """
    vocab_size = model.vocab_size
    token_ids = _integer_array("token_ids", token_ids, rank=2)
    batch_size, steps = token_ids.shape
    if steps == 0:
        raise ValueError("`token_ids` is empty: expected at least one token per row.")
    if padding_mask is None:
        padding_mask = np.ones(token_ids.shape, bool)
    padding_mask = _boolean_mask(padding_mask)
    _check_shape("padding_mask", padding_mask, token_ids.shape)
    _check_range("token_ids", token_ids, vocab_size, padding_mask)
    if target_ids is not None:
        target_ids = _integer_array("target_ids", target_ids, rank=2)
        _check_shape("target_ids", target_ids, token_ids.shape)
        _check_range("target_ids", target_ids, vocab_size, padding_mask)
        target_ids = _as_int32(target_ids, padding_mask)
    token_ids = _as_int32(token_ids, padding_mask)
    if state is not None:
        state = _checked_state(state, model.num_layers, batch_size, model.hidden_dim)
    if memory is not None:
        memory = _checked_memory(memory, batch_size, model.memory_size, model.hidden_dim,
                                 vocab_size)
    if token_chars is not None:
        token_chars = _checked_characters(model, token_chars, token_ids.shape)
    return {"token_ids": token_ids, "target_ids": target_ids, "padding_mask": padding_mask,
            "state": state, "memory": memory, "token_chars": token_chars}


def _boolean_mask(padding_mask):
    """`padding_mask` as a bool array: bool, or numbers that are all 0 or 1 (keras-hub's
    default mask is `ops.ones`, float); anything else (e.g. ids given in its place) refused."""
    mask = np.asarray(ops.convert_to_numpy(padding_mask))
    if mask.dtype == bool:
        return mask
    if mask.dtype.name == "bfloat16":  # ml_dtypes' kind is "V"
        mask = mask.astype(np.float32)
    held = ""
    if mask.dtype.kind in "iuf":
        others = np.unique(mask[(mask != 0) & (mask != 1)])
        if others.size == 0:
            return mask.astype(bool)
        held = f" holding {others[:3].tolist()}"
    raise ValueError(f"`padding_mask` must be bool or hold only 0 and 1, got dtype "
                     f"{mask.dtype}{held}.")


def _checked_characters(model, token_chars, ids_shape):
    if getattr(model, "input_embedding", "ids") != "chars":
        raise ValueError("`token_chars` was given, but the model reads ids only "
                         "(input_embedding='ids').")
    width = model.backbone.max_word_length
    array = np.asarray(ops.convert_to_numpy(token_chars))
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"`token_chars` must hold integer character ids, got dtype "
                         f"{array.dtype}.")
    _check_shape("token_chars", array, tuple(ids_shape) + (width,))
    if array.size and (array.min() < 0 or array.max() >= NUM_CHARACTER_IDS):
        raise ValueError(f"`token_chars` holds character ids outside [0, {NUM_CHARACTER_IDS})"
                         f" (got {int(array.min())} to {int(array.max())}).")
    return array.astype(np.int32)


def _integer_array(name, values, rank):
    array = np.asarray(ops.convert_to_numpy(values))
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"`{name}` must hold integer ids, got dtype {array.dtype}.")
    if array.ndim != rank:
        raise ValueError(f"`{name}` must have rank {rank} (batch_size, T), got shape "
                         f"{array.shape}.")
    # In its own dtype: the range is checked before the cast to int32, which would wrap an id
    # of 2**32 + 5 to 5.
    return array


def _as_int32(ids, mask):
    """Range-checked `ids` as int32; masked positions (padding may hold any id) become 0."""
    return np.where(mask, ids, 0).astype(np.int32)


def _check_shape(name, array, expected):
    if tuple(array.shape) != tuple(expected):
        raise ValueError(f"`{name}` must have shape {tuple(expected)}, got {array.shape}.")


def _check_range(name, ids, vocab_size, mask):
    bad = (ids < 0) | (ids >= vocab_size)
    if mask is not None:
        bad &= mask
    if bad.any():
        value = int(ids[bad][0])
        raise ValueError(f"`{name}` holds the id {value}, outside the vocabulary [0, "
                         f"{vocab_size}).")


def _finite_float(name, value, expected_shape):
    array = np.asarray(ops.convert_to_numpy(value))
    # bfloat16 (a mixed_bfloat16 model's state) is not a NumPy floating type.
    if not (np.issubdtype(array.dtype, np.floating) or array.dtype.name == "bfloat16"):
        raise ValueError(f"`{name}` must be a float array, got dtype {array.dtype}.")
    array = array.astype(np.float32)
    _check_shape(name, array, expected_shape)
    if not np.all(np.isfinite(array)):
        raise ValueError(f"`{name}` holds NaN or infinite values: expected a finite state.")
    return array.astype(np.float32)


def _checked_state(state, num_layers, batch_size, hidden_dim):
    if not isinstance(state, (tuple, list)) or len(state) != num_layers:
        raise ValueError(f"`state` must be a tuple of {num_layers} (h, c) pairs, one per layer.")
    checked = []
    for i, pair in enumerate(state):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"`state[{i}]` must be a pair (h, c).")
        checked.append(tuple(_finite_float(f"state[{i}][{j}]", part, (batch_size, hidden_dim))
                             for j, part in enumerate(pair)))
    return tuple(checked)


def _checked_memory(memory, batch_size, memory_size, hidden_dim, vocab_size):
    if not isinstance(memory, dict) or set(memory) != {"hidden", "token_ids", "mask"}:
        raise ValueError("`memory` must be a dict with `hidden`, `token_ids` and `mask` (a "
                         "previous call's `memory`, or `model.empty_memory(batch_size)`).")
    hidden = _finite_float("memory['hidden']", memory["hidden"],
                           (batch_size, memory_size, hidden_dim))
    mask = np.asarray(ops.convert_to_numpy(memory["mask"])).astype(bool)
    _check_shape("memory['mask']", mask, (batch_size, memory_size))
    token_ids = _integer_array("memory['token_ids']", memory["token_ids"], rank=2)
    _check_shape("memory['token_ids']", token_ids, (batch_size, memory_size))
    _check_range("memory['token_ids']", token_ids, vocab_size, mask)
    return {"hidden": hidden, "token_ids": _as_int32(token_ids, mask), "mask": mask}
