"""Frequency buckets, gate statistics and the attention page against hand-worked cases."""

import os
import sys
from unittest import mock

import numpy as np
import tensorflow as tf

from psmm_tf.evaluation import analysis, figures


class FrequencyBucketsTest(tf.test.TestCase):
    def test_equal_numbers_of_types_most_frequent_first(self):
        counts = np.array([5, 50, 0, 7, 7, 1])
        # Sorted: id1 (50), id3 (7), id4 (7, tie -> larger id later), id0 (5), id5 (1), id2 (0).
        buckets = analysis.frequency_buckets(counts, num_buckets=3, by="types")
        self.assertAllEqual(buckets, [1, 0, 2, 0, 1, 2])

    def test_equal_shares_of_training_tokens(self):
        counts = np.array([10, 60, 20, 10])
        # Sorted 60 | 20, 10, 10: tokens before each = 0, 60, 80, 90 of 100 -> shares .0 .6 .8 .9
        buckets = analysis.frequency_buckets(counts, num_buckets=2, by="tokens")
        self.assertAllEqual(buckets, [1, 0, 1, 1])

    def test_bucket_comparison_means(self):
        bucket_of = np.array([0, 0, 1])
        counts = np.array([9, 4, 1])
        targets = np.array([0, 1, 2, 2])
        model = np.array([1.0, 2.0, 3.0, 5.0])
        baseline = np.array([1.5, 2.0, 6.0, 6.0])
        rows = analysis.bucket_comparison(targets, model, baseline, bucket_of, counts, 2)
        self.assertEqual(rows[0]["num_targets"], 2)
        self.assertAllClose(rows[0]["mean_difference"], 0.25)
        self.assertAllClose(rows[1]["mean_difference"], 2.0)
        self.assertAllClose(rows[1]["model_log_ppl"], 4.0)
        self.assertEqual((rows[0]["min_count"], rows[0]["max_count"]), (4, 9))
        table = analysis.format_bucket_table(rows)
        self.assertIn("| 2 | 1-1 | 2 | 6.000 | 4.000 | +2.000 |", table)

    def test_target_in_window_matches_brute_force(self):
        rng = np.random.default_rng(0)
        ids = rng.integers(0, 6, size=200)
        for window in (1, 3, 10):
            expected = [ids[j + 1] in ids[max(0, j - window + 1):j + 1]
                        for j in range(len(ids) - 1)]
            self.assertAllEqual(analysis.target_in_window(ids, window), expected)

    def test_gate_statistics(self):
        gate = np.array([0.2, 0.9, 0.4, 1.0])
        in_window = np.array([True, False, True, False])
        stats = analysis.gate_statistics(gate, np.array([0, 1, 1, 0]), in_window,
                                         np.array([0, 1]), num_buckets=2)
        self.assertAllClose(stats["mean_target_in_window"], 0.3)
        self.assertAllClose(stats["mean_target_not_in_window"], 0.95)
        self.assertAllClose(stats["fraction_below_half"], 0.5)
        self.assertAllClose(stats["mean_by_bucket"], [0.6, 0.65])

    def test_chart_is_written(self):
        rows = analysis.bucket_comparison(np.array([0, 1]), np.array([1.0, 1.0]),
                                          np.array([2.0, 1.5]), np.array([0, 1]),
                                          np.array([3, 1]), 2)
        path = self.get_temp_dir() + "/buckets.png"
        analysis.plot_buckets(rows, path)
        with open(path, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


class AttentionPageTest(tf.test.TestCase):
    def test_shading_follows_attention_and_escapes_words(self):
        page = figures.render_attention_html([{
            "position": 7, "words": ["the", "<unk>", "yellen"], "weights": [0.1, 0.0, 0.4],
            "target": "yellen", "gate": 0.5, "probability": 0.45}])
        self.assertIn("gate g = 0.500", page)
        self.assertIn("pointer mass on the target = 0.400", page)
        self.assertIn("&lt;unk&gt;", page)
        self.assertIn("rgba(31, 119, 180, 0.250)'", page)  # 0.1 / 0.4
        self.assertIn("rgba(31, 119, 180, 1.000)'", page)

    def test_choose_positions_prefers_low_gate_copyable_targets(self):
        gate = np.array([0.9, 0.1, 0.8, 0.05, 0.3, 0.99])
        in_window = np.array([True, True, False, False, True, True])
        positions = figures.choose_positions(gate, in_window, count=4)
        self.assertLen(positions, 4)
        self.assertContainsSubset([1, 4, 0], positions)  # the 3 lowest copyable gates


class PlotsExtraTest(tf.test.TestCase):
    def test_missing_matplotlib_names_the_plots_extra(self):
        rows = [{"bucket": 0, "mean_difference": 0.1}]
        path = os.path.join(self.get_temp_dir(), "chart.png")
        with mock.patch.dict(sys.modules, {"matplotlib": None, "matplotlib.pyplot": None}):
            with self.assertRaisesRegex(ImportError, r"pip install 'psmm_tf\[plots\]'"):
                analysis.plot_buckets(rows, path)
        self.assertFalse(os.path.exists(path))


if __name__ == "__main__":
    tf.test.main()
