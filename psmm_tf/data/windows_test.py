"""The NumPy windows against a brute-force loop over the streams, and their checks (no
TensorFlow: this module runs on the JAX leg too)."""

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
