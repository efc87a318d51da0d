"""Windowed tf.data pipelines over a token-id stream (docs/architecture.md).

A split's id array is cut into `batch_size` contiguous streams, one per batch row, so that an
LSTM state (and, in `"cache"` mode, the pointer memory) can be carried from one window to the
next. With n = (len(ids) - 1) // batch_size, stream b is `ids[b * n : (b + 1) * n + 1]`: its
first n ids are inputs and the targets are the same ids shifted by one.

Every element is a dict of batch-major tensors:
- `token_ids`: int32 [B, C + T]. Inputs of the window; 0 where `token_mask` is False.
- `token_mask`: bool [B, C + T]. False before the start of the stream (and on padding).
- `targets`: int32 [B, T]. The next token of each of the last T input positions.
- `target_weights`: float32 [B, T]. 1.0 for a real target, 0.0 for padding.
Positions 0 .. C - 1 of a window are context (keys for the pointer, no loss); the last T are
predicted. C = L - 1, T = 1 is the paper's training scheme (`pointer_memory="recompute"`);
C = 0 gives non-overlapping T-token windows (`pointer_memory="cache"`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from psmm_tf.data.windows import (  # noqa: F401 (the pipeline's names before windows.py)
    check_ids,
    check_int,
    check_spelling,
    check_training_arguments,
    evaluation_steps,
    evaluation_window_arrays,
    split_into_streams,
    steps_per_epoch,
    stream_length,
)


def training_windows(
    ids,
    batch_size: int,
    context_length: int,
    num_predicted: int,
    *,
    shuffle_offset_seed: Optional[int] = None,
    spelling=None,
) -> tf.data.Dataset:
    """Training windows: C context positions followed by T predicted positions, shift T.

    Window k of stream b covers stream positions [o + k*T - C, o + k*T + T), where o is the
    epoch's start offset (0 unless shuffled); positions before 0 hold token 0 with mask False.
    Its targets are stream positions o + k*T + 1 .. o + k*T + T. Windows come in stream order
    (k = 0, 1, ...) so state carried between consecutive elements stays valid; the last partial
    window is dropped so every element has the same static shape. One pass = one epoch; call
    `.repeat()` or let `model.fit` re-iterate it.

    Shuffling: random reordering would break the streams, so the only randomness offered is a
    start offset o drawn uniformly from [0, T) afresh on every iteration of the dataset (every
    epoch), deterministic given `shuffle_offset_seed` (and the global `tf.random.set_seed`, if
    one is set): the same seed gives the same offsets epoch after epoch, across processes. It
    moves the window boundaries, so over epochs each token is predicted at every position of a
    window and with a different amount of BPTT history. With T = 1 it is always 0.

    Args:
        ids: array-like of int, 1-D. The split's token ids.
        batch_size: int >= 1. Number of streams B (batch rows).
        context_length: int >= 0. Context positions C before the predicted ones.
        num_predicted: int >= 1. Predicted positions T per window, also the shift.
        shuffle_offset_seed: optional int. Enables the per-epoch random start offset.
        spelling: optional `psmm_tf.data.spelling.Spelling` of the same tokens: the windows
            also hold `token_chars` int32 [B, C + T, max_word_length] (zeros where masked).

    Returns:
        tf.data.Dataset of dicts: `token_ids` int32 [B, C + T], `token_mask` bool [B, C + T],
        `targets` int32 [B, T], `target_weights` float32 [B, T] (all 1.0). Cardinality
        `steps_per_epoch(len(ids), B, T, shuffled=shuffle_offset_seed is not None)`.

    Raises:
        ValueError: for a bad argument, or too few ids for one window.
    """
    shuffled = shuffle_offset_seed is not None
    ids, batch_size, context_length, num_predicted, num_windows = check_training_arguments(
        ids, batch_size, context_length, num_predicted, shuffled, spelling)
    n = stream_length(len(ids), batch_size)
    window_size = context_length + num_predicted
    ids_tensor = tf.constant(ids, tf.int32)
    if spelling is not None:
        spelling_ids = tf.constant(spelling.ids, tf.int32)
        spelling_table = tf.constant(spelling.table, tf.int32)
    stream_starts = tf.constant(np.arange(batch_size, dtype=np.int64)[:, None] * n)  # [B, 1]
    relative = tf.range(-context_length, num_predicted, dtype=tf.int64)  # [C + T]
    target_relative = tf.range(1, num_predicted + 1, dtype=tf.int64)  # [T]

    # No Python control flow inside: skip AutoGraph (faster tracing, no conversion warnings).
    @tf.autograph.experimental.do_not_convert
    def make_window(k, offset):
        start = offset + k * num_predicted
        positions = start + relative  # [C + T]
        mask = positions >= 0
        # Clamp, gather, then zero: a gather at a negative index would be an error.
        gathered = tf.gather(ids_tensor, stream_starts + tf.maximum(positions, 0)[None, :])
        token_ids = tf.where(mask[None, :], gathered, tf.zeros_like(gathered))
        targets = tf.gather(ids_tensor, stream_starts + (start + target_relative)[None, :])
        window = {
            "token_ids": tf.ensure_shape(token_ids, [batch_size, window_size]),
            "token_mask": tf.broadcast_to(mask[None, :], [batch_size, window_size]),
            "targets": tf.ensure_shape(targets, [batch_size, num_predicted]),
            "target_weights": tf.ones([batch_size, num_predicted], tf.float32),
        }
        if spelling is not None:
            spelled = tf.gather(spelling_ids, stream_starts + tf.maximum(positions, 0)[None, :])
            chars = tf.gather(spelling_table, spelled) * tf.cast(mask, tf.int32)[None, :, None]
            window["token_chars"] = tf.ensure_shape(chars, [batch_size, window_size, None])
        return window

    windows = tf.data.Dataset.range(num_windows)
    if shuffled:
        offsets = tf.data.Dataset.random(
            seed=shuffle_offset_seed, rerandomize_each_iteration=True
        ).take(1)

        @tf.autograph.experimental.do_not_convert
        def with_offset(random_value):
            offset = tf.math.floormod(random_value, num_predicted)

            @tf.autograph.experimental.do_not_convert
            def pair(k):
                return k, offset

            return windows.map(pair)

        dataset = offsets.flat_map(with_offset).map(
            make_window, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_windows))
    else:

        @tf.autograph.experimental.do_not_convert
        def unshuffled_window(k):
            return make_window(k, tf.constant(0, tf.int64))

        dataset = windows.map(
            unshuffled_window, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
    return dataset.prefetch(tf.data.AUTOTUNE)


def evaluation_windows(ids, batch_size: int = 1, length: int = 100,
                       spelling=None) -> tf.data.Dataset:
    """`psmm_tf.data.windows.evaluation_window_arrays` as a tf.data.Dataset (its arguments,
    checks and windows): every target of the split exactly once, C = 0, padded at the end; one
    element per window, dicts of [B, T] tensors with the keys of `training_windows` (and
    `token_chars` [B, T, max_word_length] with `spelling`). Cardinality
    `evaluation_steps(len(ids), B, length)`.
    """
    features = evaluation_window_arrays(ids, batch_size, length, spelling)
    return tf.data.Dataset.from_tensor_slices(features).prefetch(tf.data.AUTOTUNE)
