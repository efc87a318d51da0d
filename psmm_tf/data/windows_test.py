"""The NumPy windows against brute-force loops over the streams, and their checks (no
TensorFlow: this module runs on the JAX leg too; the tf.data windows are held to these in
pipeline_test)."""

import numpy as np

from psmm_tf import testing
from psmm_tf.data import windows


def _brute_force(ids, batch_size, length):
    """Window k, row b, column t reads target j = b * n + k * length + t, when it exists."""
    n = -(-(len(ids) - 1) // batch_size)
    num_windows = -(-n // length)
    shape = (num_windows, batch_size, length)
    expected = {"token_ids": np.zeros(shape, np.int32), "targets": np.zeros(shape, np.int32),
                "token_mask": np.zeros(shape, bool),
                "target_weights": np.zeros(shape, np.float32)}
    for k in range(num_windows):
        for b in range(batch_size):
            for t in range(length):
                position = k * length + t
                j = b * n + position
                if position < n and j < len(ids) - 1:
                    expected["token_ids"][k, b, t] = ids[j]
                    expected["targets"][k, b, t] = ids[j + 1]
                    expected["token_mask"][k, b, t] = True
                    expected["target_weights"][k, b, t] = 1.0
    return expected


def _training_loop(ids, batch_size, context_length, num_predicted, offset=0):
    """Training windows from their definition (window k of stream b covers stream positions
    [o + k*T - C, o + k*T + T)), with Python loops, until a window would pass the stream's end."""
    n = (len(ids) - 1) // batch_size
    streams = [ids[b * n : (b + 1) * n + 1] for b in range(batch_size)]
    out = []
    k = 0
    while offset + k * num_predicted + num_predicted <= n:
        start = offset + k * num_predicted
        tokens = np.zeros((batch_size, context_length + num_predicted), np.int32)
        mask = np.zeros_like(tokens, bool)
        targets = np.zeros((batch_size, num_predicted), np.int32)
        for b, stream in enumerate(streams):
            for j, p in enumerate(range(start - context_length, start + num_predicted)):
                if p >= 0:
                    tokens[b, j], mask[b, j] = stream[p], True
            for j in range(num_predicted):
                targets[b, j] = stream[start + 1 + j]
        out.append({"token_ids": tokens, "token_mask": mask, "targets": targets,
                    "target_weights": np.ones(targets.shape, np.float32)})
        k += 1
    return out


class TrainingWindowsTest(testing.TestCase):

    def test_windows_equal_the_loop_at_every_offset(self):
        ids = self.rng.integers(0, 50, size=97)
        for batch_size, context, predicted in ((1, 0, 1), (3, 4, 1), (4, 0, 7), (2, 9, 3),
                                               (5, 3, 3), (1, 20, 4), (3, 2, 16)):
            for offset in (None, *range(predicted)):
                listed = list(windows.iter_training_windows(ids, batch_size, context, predicted,
                                                            offset=offset))
                expected = _training_loop(ids, batch_size, context, predicted, offset or 0)
                shuffled = offset is not None
                count = windows.steps_per_epoch(97, batch_size, predicted, shuffled=shuffled)
                self.assertLen(listed, count)
                # Unshuffled: every window that fits. At an offset: the count that fits at the
                # last offset, T - 1, so that every epoch has as many steps.
                if offset is None or offset == predicted - 1:
                    self.assertLen(expected, count)
                self.assertGreaterEqual(len(expected), count)
                for window, reference in zip(listed, expected[:count], strict=True):
                    self.assertEqual(sorted(window), sorted(reference))
                    for key, value in reference.items():
                        self.assertEqual(window[key].dtype, value.dtype, key)
                        self.assertAllEqual(window[key], value,
                                            msg=(batch_size, context, predicted, offset, key))

    def test_hand_worked_windows_at_an_offset(self):
        # ids 100..110, B = 2: n = 5, streams 100..105 and 105..110; C = 1, T = 2, offset 1:
        # (5 - 2 + 1) // 2 = 2 windows, at stream positions [0, 3) and [2, 5).
        listed = list(windows.iter_training_windows(np.arange(100, 111), 2, 1, 2, offset=1))
        self.assertLen(listed, 2)
        self.assertAllEqual(listed[0]["token_ids"], [[100, 101, 102], [105, 106, 107]])
        self.assertAllEqual(listed[0]["targets"], [[102, 103], [107, 108]])
        self.assertAllEqual(listed[1]["token_ids"], [[102, 103, 104], [107, 108, 109]])
        self.assertAllEqual(listed[1]["targets"], [[104, 105], [109, 110]])
        unshuffled = list(windows.iter_training_windows(np.arange(100, 111), 2, 1, 2))
        self.assertAllEqual(unshuffled[0]["token_ids"], [[0, 100, 101], [0, 105, 106]])
        self.assertAllEqual(unshuffled[0]["token_mask"], [[False, True, True]] * 2)

    def test_bad_arguments_are_named_before_any_window(self):
        ids = np.arange(100, 111)
        for args, named, message in (
                ((ids, 0, 1, 1), {}, "batch_size must be >= 1, got 0"),
                ((ids, 2, -1, 1), {}, "context_length must be >= 0, got -1"),
                ((ids, 2, 1, 0), {}, "num_predicted must be >= 1, got 0"),
                ((ids, 2, 1, 6), {}, r"ids has 11 tokens: too few for one window of "
                                     r"num_predicted=6 with batch_size=2 \(needs at least 13\)"),
                ((ids, 2, 1, 4), {"offset": 0}, r"needs at least 15"),  # unshuffled: fits
                ((ids, 2, 1, 2), {"offset": 2}, "offset must be < num_predicted=2, got 2"),
                ((ids, 2, 1, 2), {"offset": -1}, "offset must be >= 0, got -1"),
                ((ids, 2, 1, 2), {"offset": 1.0}, "offset must be an int, got 1.0"),
                ((ids.astype(float), 2, 1, 2), {}, "integer token ids"),
        ):
            with self.assertRaisesRegex(ValueError, message):
                windows.iter_training_windows(*args, **named)


class EvaluationWindowsTest(testing.TestCase):

    def test_windows_equal_the_loop_and_hold_every_target_once(self):
        ids = self.rng.integers(1, 50, size=23)
        for batch_size, length in ((1, 5), (3, 4), (4, 100), (22, 1)):
            arrays = windows.evaluation_window_arrays(ids, batch_size, length)
            expected = _brute_force(ids, batch_size, length)
            self.assertEqual(sorted(arrays), sorted(expected))
            for key, value in expected.items():
                self.assertEqual(arrays[key].dtype, value.dtype, key)
                self.assertAllEqual(arrays[key], value, msg=(batch_size, length, key))
            self.assertEqual(arrays["target_weights"].sum(), 22)
            self.assertEqual(len(arrays["token_ids"]), windows.evaluation_steps(23, batch_size,
                                                                                length))

    def test_iteration_gives_the_windows_one_at_a_time(self):
        ids = self.rng.integers(0, 50, size=30)
        arrays = windows.evaluation_window_arrays(ids, 2, 4)
        listed = list(windows.iter_evaluation_windows(ids, batch_size=2, length=4))
        self.assertLen(listed, 4)  # n = ceil(29 / 2) = 15 targets per stream, 4 windows of 4
        for k, window in enumerate(listed):
            self.assertEqual(window["token_ids"].shape, (2, 4))
            for key in arrays:
                self.assertAllEqual(window[key], arrays[key][k])

    def test_iteration_cuts_streams_and_windows_to_the_text(self):
        # 23 ids, 22 targets: at most 22 streams; 3 streams of ceil(22 / 3) = 8 targets.
        self.assertEqual(windows.evaluation_window_shape(23, 100, 100), (22, 1))
        self.assertEqual(windows.evaluation_window_shape(23, 3, 100), (3, 8))
        self.assertEqual(windows.evaluation_window_shape(23, 3, 5), (3, 5))
        ids = self.rng.integers(0, 50, size=23)
        listed = list(windows.iter_evaluation_windows(ids, batch_size=10**9, length=10**9))
        expected = windows.evaluation_window_arrays(ids, 22, 1)  # only padding cut away
        self.assertLen(listed, len(expected["token_ids"]))
        for k, window in enumerate(listed):
            for key in expected:
                self.assertAllEqual(window[key], expected[key][k])
        with self.assertRaisesRegex(ValueError, "length must be >= 1, got 0"):
            windows.evaluation_window_shape(23, 1, 0)

    def test_shapes_by_hand(self):
        self.assertEqual(windows.stream_length(101, 4), 25)
        self.assertEqual(windows.steps_per_epoch(101, 4, 5), 5)
        self.assertEqual(windows.steps_per_epoch(101, 4, 5, shuffled=True), 4)
        self.assertEqual(windows.evaluation_stream_length(101, 3), 34)
        self.assertEqual(windows.evaluation_steps(101, 3, 10), 4)
        self.assertAllEqual(windows.split_into_streams(np.arange(7), 2),
                            [[0, 1, 2, 3], [3, 4, 5, 6]])

    def test_bad_arguments_are_named(self):
        for args, message in (
                (([5],), "at least 2"),
                (([[1, 2, 3]],), "1-D array"),
                (([1.5, 2.5],), "integer token ids"),
                (([1, -2, 3],), r"\[0, 2\*\*31\)"),
                (([1, 2, 3], 0), "batch_size must be >= 1"),
                (([1, 2, 3], 1, True), "length must be an int"),
        ):
            with self.assertRaisesRegex(ValueError, message):
                windows.evaluation_window_arrays(*args)


if __name__ == "__main__":
    testing.main()
