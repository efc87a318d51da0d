"""Tests of the windowed pipelines: hand-worked windows, the NumPy windows, full coverage."""

import collections

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from psmm_tf import testing
from psmm_tf.data import pipeline
from psmm_tf.data import windows as numpy_windows

# Ids equal to 100 + position, so a value says where it came from. 11 ids, batch_size 2:
# n = 5, stream 0 = 100..105, stream 1 = 105..110.
IDS = np.arange(100, 111)


def _windows(dataset):
    return [{k: v.numpy() for k, v in element.items()} for element in dataset]


def _assert_windows_equal(test, windows, expected):
    """tf.data's windows equal the NumPy ones (held to a loop over the streams in windows_test)."""
    test.assertLen(windows, len(expected))
    for window, reference in zip(windows, expected, strict=True):
        test.assertEqual(sorted(window), sorted(reference))
        for key, value in reference.items():
            test.assertAllEqual(window[key], value, msg=key)


class TrainingWindowsTest(testing.TestCase, parameterized.TestCase):
    def test_recompute_mode_hand_worked(self):
        # C = 2, T = 1: each window is the 2 previous tokens and the current one.
        windows = _windows(pipeline.training_windows(IDS, 2, 2, 1))
        self.assertLen(windows, 5)
        self.assertAllEqual(windows[0]["token_ids"], [[0, 0, 100], [0, 0, 105]])
        self.assertAllEqual(windows[0]["token_mask"], [[False, False, True]] * 2)
        self.assertAllEqual(windows[0]["targets"], [[101], [106]])
        self.assertAllEqual(windows[1]["token_ids"], [[0, 100, 101], [0, 105, 106]])
        self.assertAllEqual(windows[1]["token_mask"], [[False, True, True]] * 2)
        self.assertAllEqual(windows[4]["token_ids"], [[102, 103, 104], [107, 108, 109]])
        self.assertAllEqual(windows[4]["token_mask"], [[True, True, True]] * 2)
        self.assertAllEqual(windows[4]["targets"], [[105], [110]])
        self.assertAllEqual(windows[4]["target_weights"], [[1.0], [1.0]])

    def test_context_longer_than_shift_hand_worked(self):
        # C = 3, T = 2: windows overlap by 3 and cross the boundary of the previous window.
        windows = _windows(pipeline.training_windows(IDS, 2, 3, 2))
        self.assertLen(windows, 2)  # n // T = 5 // 2; the last partial window is dropped.
        self.assertAllEqual(windows[0]["token_ids"], [[0, 0, 0, 100, 101], [0, 0, 0, 105, 106]])
        self.assertAllEqual(windows[0]["targets"], [[101, 102], [106, 107]])
        self.assertAllEqual(
            windows[1]["token_ids"], [[0, 100, 101, 102, 103], [0, 105, 106, 107, 108]]
        )
        self.assertAllEqual(windows[1]["token_mask"], [[False, True, True, True, True]] * 2)
        self.assertAllEqual(windows[1]["targets"], [[103, 104], [108, 109]])

    def test_cache_mode_hand_worked(self):
        # C = 0, T = 2: non-overlapping windows, consecutive across elements.
        windows = _windows(pipeline.training_windows(IDS, 2, 0, 2))
        self.assertAllEqual(
            [w["token_ids"].tolist() for w in windows],
            [
                [[100, 101], [105, 106]],
                [[102, 103], [107, 108]],
            ],
        )
        self.assertAllEqual(
            [w["targets"].tolist() for w in windows],
            [
                [[101, 102], [106, 107]],
                [[103, 104], [108, 109]],
            ],
        )
        self.assertTrue(all(w["token_mask"].all() for w in windows))

    @parameterized.parameters(
        (1, 0, 1), (3, 4, 1), (4, 0, 7), (2, 9, 3), (5, 3, 3), (1, 20, 4), (3, 2, 16)
    )
    def test_matches_reference_and_static_shapes(self, batch_size, context, predicted):
        ids = self.rng.integers(0, 50, size=97)
        dataset = pipeline.training_windows(ids, batch_size, context, predicted)
        spec = dataset.element_spec
        self.assertEqual(spec["token_ids"].shape, (batch_size, context + predicted))
        self.assertEqual(spec["token_ids"].dtype, tf.int32)
        self.assertEqual(spec["token_mask"].dtype, tf.bool)
        self.assertEqual(spec["targets"].shape, (batch_size, predicted))
        self.assertEqual(spec["target_weights"].dtype, tf.float32)
        expected = list(numpy_windows.iter_training_windows(ids, batch_size, context, predicted))
        self.assertEqual(int(dataset.cardinality()), len(expected))
        self.assertEqual(numpy_windows.steps_per_epoch(97, batch_size, predicted), len(expected))
        _assert_windows_equal(self, _windows(dataset), expected)

    def test_targets_of_consecutive_windows_tile_each_stream(self):
        ids = np.arange(1000, 1000 + 103)
        listed = _windows(pipeline.training_windows(ids, 4, 5, 3))
        streams = numpy_windows.split_into_streams(ids, 4)  # n = 25: 8 windows of 3 targets.
        self.assertEqual(streams.shape, (4, 26))
        targets = np.concatenate([w["targets"] for w in listed], axis=1)
        self.assertAllEqual(targets, streams[:, 1:25])

    def test_shuffled_offset_per_epoch_deterministic_from_seed(self):
        ids = np.arange(200, 200 + 81)  # batch 2: n = 40.
        dataset = pipeline.training_windows(ids, 2, 3, 4, shuffle_offset_seed=7)
        num_windows = numpy_windows.steps_per_epoch(81, 2, 4, shuffled=True)
        self.assertEqual(num_windows, 9)  # (40 - 4 + 1) // 4
        self.assertEqual(int(dataset.cardinality()), num_windows)
        offsets = []
        for _ in range(8):  # Each iteration is an epoch.
            listed = _windows(dataset)
            offset = int(listed[0]["targets"][0, 0]) - 201
            offsets.append(offset)
            _assert_windows_equal(
                self, listed,
                list(numpy_windows.iter_training_windows(ids, 2, 3, 4, offset=offset)))
        self.assertTrue(all(0 <= o < 4 for o in offsets))
        self.assertGreater(len(set(offsets)), 1)
        again = pipeline.training_windows(ids, 2, 3, 4, shuffle_offset_seed=7)
        self.assertEqual(
            [int(_windows(again.take(1))[0]["targets"][0, 0]) - 201 for _ in range(8)], offsets
        )

    def test_unshuffled_is_identical_across_iterations(self):
        dataset = pipeline.training_windows(IDS, 2, 1, 2)
        first, second = _windows(dataset), _windows(dataset)
        for a, b in zip(first, second, strict=True):
            self.assertAllEqual(a["token_ids"], b["token_ids"])

    def test_invalid_arguments(self):
        cases = [
            (dict(ids=np.zeros((2, 5), np.int32)), r"ids must be a 1-D array .*shape \(2, 5\)"),
            (dict(ids=np.zeros(10, np.float32)), r"ids must be integer token ids, got dtype"),
            (dict(ids=np.array([1, -2, 3])), r"ids must lie in \[0, 2\*\*31\)"),
            (dict(batch_size=0), r"batch_size must be >= 1, got 0"),
            (dict(batch_size=2.0), r"batch_size must be an int, got 2.0"),
            (dict(context_length=-1), r"context_length must be >= 0, got -1"),
            (dict(num_predicted=0), r"num_predicted must be >= 1, got 0"),
            (
                dict(num_predicted=6),
                r"ids has 11 tokens: too few for one window of "
                r"num_predicted=6 with batch_size=2 \(needs at least 13\)",
            ),
        ]
        for overrides, regex in cases:
            kwargs = dict(ids=IDS, batch_size=2, context_length=1, num_predicted=1)
            kwargs.update(overrides)
            with self.assertRaisesRegex(ValueError, regex):
                pipeline.training_windows(**kwargs)


class EvaluationWindowsTest(testing.TestCase, parameterized.TestCase):
    def test_hand_worked_padding(self):
        # 11 ids -> 10 targets; batch 3: n = ceil(10 / 3) = 4, streams cover targets
        # 101..104, 105..108, 109..110 (+ 2 padding); length 3 -> 2 windows.
        windows = _windows(pipeline.evaluation_windows(IDS, batch_size=3, length=3))
        self.assertLen(windows, 2)
        self.assertAllEqual(
            windows[0]["token_ids"], [[100, 101, 102], [104, 105, 106], [108, 109, 0]]
        )
        self.assertAllEqual(
            windows[0]["targets"], [[101, 102, 103], [105, 106, 107], [109, 110, 0]]
        )
        self.assertAllEqual(windows[0]["token_mask"], [[1, 1, 1], [1, 1, 1], [1, 1, 0]])
        self.assertAllEqual(windows[0]["target_weights"], [[1, 1, 1], [1, 1, 1], [1, 1, 0]])
        self.assertAllEqual(windows[1]["token_ids"], [[103, 0, 0], [107, 0, 0], [0, 0, 0]])
        self.assertAllEqual(windows[1]["targets"], [[104, 0, 0], [108, 0, 0], [0, 0, 0]])
        self.assertAllEqual(windows[1]["target_weights"], [[1, 0, 0], [1, 0, 0], [0, 0, 0]])
        self.assertEqual(windows[1]["target_weights"].dtype, np.float32)

    @parameterized.parameters((1, 100), (1, 7), (3, 10), (4, 1), (7, 13), (64, 5), (200, 3))
    def test_every_target_exactly_once(self, batch_size, length):
        ids = self.rng.integers(0, 30, size=151)
        dataset = pipeline.evaluation_windows(ids, batch_size, length)
        windows = _windows(dataset)
        self.assertEqual(len(windows), numpy_windows.evaluation_steps(151, batch_size, length))
        self.assertEqual(int(dataset.cardinality()), len(windows))
        self.assertEqual(dataset.element_spec["targets"].shape, (batch_size, length))
        # Multiset of (input, target) pairs over weight-1 targets == the split's bigrams.
        got = collections.Counter()
        for w in windows:
            weight = w["target_weights"] == 1.0
            self.assertAllEqual(weight, w["token_mask"])
            self.assertAllEqual(w["targets"][~weight], np.zeros((~weight).sum()))
            self.assertAllEqual(w["token_ids"][~weight], np.zeros((~weight).sum()))
            pairs = zip(w["token_ids"][weight].tolist(), w["targets"][weight].tolist(), strict=True)
            got.update(pairs)
        self.assertEqual(
            got, collections.Counter(zip(ids[:-1].tolist(), ids[1:].tolist(), strict=True))
        )
        self.assertEqual(sum(float(w["target_weights"].sum()) for w in windows), 150.0)

    def test_batch_one_is_the_whole_stream_in_order(self):
        ids = np.arange(500, 500 + 23)
        windows = _windows(pipeline.evaluation_windows(ids, length=5))
        targets = np.concatenate([w["targets"] for w in windows], axis=1)[0]
        self.assertAllEqual(targets, np.concatenate([ids[1:], np.zeros(3, int)]))

    def test_invalid_arguments(self):
        with self.assertRaisesRegex(ValueError, r"ids has 1 tokens: evaluation needs at least 2"):
            pipeline.evaluation_windows([5])
        with self.assertRaisesRegex(ValueError, r"length must be >= 1, got 0"):
            pipeline.evaluation_windows(IDS, 1, 0)
        with self.assertRaisesRegex(ValueError, r"ids must be a 1-D array"):
            pipeline.evaluation_windows([[1, 2, 3]])


if __name__ == "__main__":
    tf.test.main()
