"""Token windows as NumPy arrays, with no TensorFlow: the shapes and checks the tf.data
pipelines (`psmm_tf.data.pipeline`) share, the training windows of a JAX training loop, and the
evaluation windows that `Evaluator` and the pointer diagnostics read on the TensorFlow and JAX
backends.

A split's id array is cut into B contiguous streams, one per batch row, so that an LSTM state
(and the pointer memory) can be carried from one window to the next. A window is a dict of
batch-major arrays: `token_ids` int32 [B, T], `token_mask` bool [B, T], `targets` int32 [B, T],
`target_weights` float32 [B, T] (and `token_chars` int32 [B, T, max_word_length] for a model
with character inputs).
"""

from __future__ import annotations

import numpy as np


def check_ids(ids) -> np.ndarray:
    """`ids` as an int32 1-D array; ValueError naming what is wrong (shape, dtype, range)."""
    array = np.asarray(ids)
    if array.ndim != 1:
        raise ValueError(f"ids must be a 1-D array of token ids, got shape {array.shape}.")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"ids must be integer token ids, got dtype {array.dtype}.")
    if array.size and (array.min() < 0 or array.max() > np.iinfo(np.int32).max):
        raise ValueError(
            f"ids must lie in [0, 2**31), got values in [{array.min()}, {array.max()}]."
        )
    return array.astype(np.int32, copy=False)


def check_spelling(spelling, ids) -> None:
    """ValueError unless `spelling` (a `Spelling` or None) spells as many tokens as `ids`."""
    if spelling is not None and len(spelling) != len(ids):
        raise ValueError(f"spelling spells {len(spelling)} tokens; ids has {len(ids)}: give "
                         "the Spelling of the same tokens (sliced as they are).")


def check_int(value, name: str, minimum: int) -> int:
    """`value` as an int >= `minimum`; ValueError naming the argument `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}.")
    return int(value)


def stream_length(num_ids: int, batch_size: int) -> int:
    """Number of input positions n of each training stream: (num_ids - 1) // batch_size."""
    return (num_ids - 1) // batch_size


def steps_per_epoch(
    num_ids: int, batch_size: int, num_predicted: int, *, shuffled: bool = False
) -> int:
    """Number of elements of `training_windows` for a split of `num_ids` ids.

    Args:
        num_ids: int. Length of the split's id array.
        batch_size: int. Number of streams B.
        num_predicted: int. Predicted positions per window T.
        shuffled: bool. Whether `shuffle_offset_seed` is set (one window fewer may fit).

    Returns:
        int. n // T, or (n - T + 1) // T when shuffled, with n = (num_ids - 1) // batch_size.
    """
    n = stream_length(num_ids, batch_size)
    return (n - num_predicted + 1) // num_predicted if shuffled else n // num_predicted


def split_into_streams(ids, batch_size: int) -> np.ndarray:
    """The `batch_size` training streams of a split, as a reference in NumPy.

    Args:
        ids: array-like of int, 1-D.
        batch_size: int. Number of streams B.

    Returns:
        np.ndarray. int32 [B, n + 1]; row b = ids[b * n : (b + 1) * n + 1].
    """
    ids = check_ids(ids)
    n = stream_length(len(ids), check_int(batch_size, "batch_size", 1))
    if n < 1:
        raise ValueError(f"ids has {len(ids)} tokens: too few for batch_size={batch_size}.")
    return ids[np.arange(batch_size)[:, None] * n + np.arange(n + 1)[None, :]]


def check_training_arguments(ids, batch_size, context_length, num_predicted, shuffled,
                             spelling=None):
    """The training windows' arguments checked; ValueError naming a bad one, or too few ids.

    Returns:
        `(ids, batch_size, context_length, num_predicted, num_windows)`: ids as an int32
        array, the ints as ints, and the epoch's `steps_per_epoch` (at least 1).
    """
    ids = check_ids(ids)
    check_spelling(spelling, ids)
    batch_size = check_int(batch_size, "batch_size", 1)
    context_length = check_int(context_length, "context_length", 0)
    num_predicted = check_int(num_predicted, "num_predicted", 1)
    num_windows = steps_per_epoch(len(ids), batch_size, num_predicted, shuffled=shuffled)
    if num_windows < 1:
        needed = batch_size * (2 * num_predicted - 1 if shuffled else num_predicted) + 1
        raise ValueError(
            f"ids has {len(ids)} tokens: too few for one window of num_predicted="
            f"{num_predicted} with batch_size={batch_size} (needs at least {needed})."
        )
    return ids, batch_size, context_length, num_predicted, num_windows


def iter_training_windows(ids, batch_size: int, context_length: int, num_predicted: int, *,
                          offset=None, spelling=None):
    """One epoch of training windows, one dict of NumPy arrays at a time (a JAX loop's input).

    The windows of `psmm_tf.data.pipeline.training_windows` (the tf.data form psmm-train reads)
    at a given start offset: window k of stream b covers stream positions
    [o + k*T - C, o + k*T + T), positions before 0 hold token 0 with mask False, and its targets
    are stream positions o + k*T + 1 .. o + k*T + T; the last partial window is dropped.

    Args:
        ids: array-like of int, 1-D. The split's token ids.
        batch_size: int >= 1. Number of streams B.
        context_length: int >= 0. Context positions C before the predicted ones.
        num_predicted: int >= 1. Predicted positions T per window, also the shift.
        offset: None, or the epoch's start offset o, an int in [0, T). None starts at 0 and
            gives `steps_per_epoch(len(ids), B, T)` windows; an int gives the shuffled count,
            `steps_per_epoch(..., shuffled=True)`, the same for every o. To move the window
            boundaries from epoch to epoch as psmm-train does, draw o afresh for every epoch,
            e.g. `np.random.default_rng([seed, epoch]).integers(num_predicted)`.
        spelling: optional `Spelling` of the same tokens: windows also hold `token_chars`
            int32 [B, C + T, max_word_length] (zeros where masked).

    Yields:
        dicts: `token_ids` int32 [B, C + T], `token_mask` bool [B, C + T], `targets` int32
        [B, T], `target_weights` float32 [B, T] (all 1.0).

    Raises:
        ValueError: for a bad argument, or too few ids for one window (before the first
            window is made).
    """
    shuffled = offset is not None
    ids, batch_size, context_length, num_predicted, num_windows = check_training_arguments(
        ids, batch_size, context_length, num_predicted, shuffled, spelling)
    if shuffled:
        offset = check_int(offset, "offset", 0)
        if offset >= num_predicted:
            raise ValueError(f"offset must be < num_predicted={num_predicted}, got {offset}.")
    return _training_windows(ids, batch_size, context_length, num_predicted, num_windows,
                             offset or 0, spelling)


def _training_windows(ids, batch_size, context_length, num_predicted, num_windows, offset,
                      spelling):
    n = stream_length(len(ids), batch_size)
    stream_starts = np.arange(batch_size)[:, None] * n  # [B, 1]
    relative = np.arange(-context_length, num_predicted)  # [C + T]
    target_relative = np.arange(1, num_predicted + 1)  # [T]
    for k in range(num_windows):
        start = offset + k * num_predicted
        positions = start + relative
        mask = np.broadcast_to(positions >= 0, (batch_size, len(relative)))
        index = stream_starts + np.maximum(positions, 0)[None, :]  # [B, C + T]
        window = {
            "token_ids": np.where(mask, ids[index], 0).astype(np.int32),
            "token_mask": mask.copy(),
            "targets": ids[stream_starts + start + target_relative[None, :]],
            "target_weights": np.ones((batch_size, num_predicted), np.float32),
        }
        if spelling is not None:
            window["token_chars"] = spelling.characters(index) * mask[..., None]
        yield window


def evaluation_stream_length(num_ids: int, batch_size: int) -> int:
    """Targets n of each evaluation stream: ceil((num_ids - 1) / batch_size) (the last stream
    may hold fewer)."""
    return -(-(num_ids - 1) // batch_size)


def evaluation_steps(num_ids: int, batch_size: int, length: int) -> int:
    """Number of windows K of `evaluation_window_arrays`: ceil(n / length), n the
    `evaluation_stream_length`."""
    return -(-evaluation_stream_length(num_ids, batch_size) // length)


def evaluation_window_arrays(ids, batch_size: int = 1, length: int = 100,
                             spelling=None) -> dict:
    """Evaluation windows: every target of the split exactly once, C = 0, padded at the end.

    The split is cut into B streams of n = ceil((len(ids) - 1) / B) input positions (the last
    stream may be shorter), then into non-overlapping windows of `length` positions. Padding
    positions (past the end of a stream) hold token 0, mask False, target 0 and weight 0, so
    the sum of `target_weights` over the windows is len(ids) - 1.

    Exact evaluation, where every target sees its full history through the carried LSTM state
    and pointer memory, needs batch_size=1: with B > 1, streams b > 0 start without context.

    Args:
        ids: array-like of int, 1-D, at least 2 ids.
        batch_size: int >= 1. Number of streams B.
        length: int >= 1. Positions per window T.
        spelling: optional `Spelling` of the same tokens: windows also hold `token_chars`
            int32 [K, B, T, max_word_length] (zeros at padding).

    Returns:
        dict of arrays with K = `evaluation_steps(len(ids), B, length)` windows first:
        `token_ids` int32 [K, B, T], `token_mask` bool [K, B, T], `targets` int32 [K, B, T],
        `target_weights` float32 [K, B, T].

    Raises:
        ValueError: for a bad argument, or fewer than 2 ids.
    """
    ids = check_ids(ids)
    check_spelling(spelling, ids)
    batch_size = check_int(batch_size, "batch_size", 1)
    length = check_int(length, "length", 1)
    if len(ids) < 2:
        raise ValueError(f"ids has {len(ids)} tokens: evaluation needs at least 2 (one target).")
    n = evaluation_stream_length(len(ids), batch_size)
    num_windows = evaluation_steps(len(ids), batch_size, length)
    # Windows do not overlap, so all of them together are only ~len(ids) ids: build them at
    # once. positions[k, b, t] = stream position of row b, column t of window k.
    positions = np.arange(num_windows * length).reshape(num_windows, 1, length)
    global_index = np.arange(batch_size).reshape(1, batch_size, 1) * n + positions
    valid = (positions < n) & (global_index < len(ids) - 1)
    safe = np.where(valid, global_index, 0)
    features = {
        "token_ids": np.where(valid, ids[safe], 0).astype(np.int32),
        "token_mask": valid,
        "targets": np.where(valid, ids[safe + 1], 0).astype(np.int32),
        "target_weights": valid.astype(np.float32),
    }
    if spelling is not None:
        features["token_chars"] = spelling.characters(safe) * valid[..., None]
    return features


def evaluation_window_shape(num_ids: int, batch_size: int, length: int) -> tuple:
    """`(B, T)` of `iter_evaluation_windows` for a text of `num_ids` ids: `batch_size` and
    `length` cut to the text, at most one stream per target and windows at most a stream long
    (more would only be padding: the same scores, without its memory). ValueError for a bad
    argument."""
    batch_size = check_int(batch_size, "batch_size", 1)
    length = check_int(length, "length", 1)
    batch_size = min(batch_size, max(num_ids - 1, 1))
    return batch_size, min(length, max(evaluation_stream_length(num_ids, batch_size), 1))


def iter_evaluation_windows(ids, batch_size: int = 1, length: int = 100, spelling=None):
    """The windows of `evaluation_window_arrays`, one dict of [B, T] arrays at a time, with
    `(B, T) = evaluation_window_shape(len(ids), batch_size, length)`."""
    ids = check_ids(ids)
    batch_size, length = evaluation_window_shape(len(ids), batch_size, length)
    features = evaluation_window_arrays(ids, batch_size, length, spelling)
    for k in range(len(features["token_ids"])):
        yield {key: value[k] for key, value in features.items()}
