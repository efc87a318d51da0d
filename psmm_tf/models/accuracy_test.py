"""The tasks' accuracy against NumPy's argmax, ties and out-of-range targets included, on
the process's backend (its JAX form runs under KERAS_BACKEND=jax)."""

import unittest

import keras
import numpy as np

from psmm_tf.models.accuracy import SparseCategoricalAccuracy, sparse_categorical_accuracy


class AccuracyTest(unittest.TestCase):

    def setUp(self):
        rng = np.random.default_rng(0)
        # Few distinct values: many rows hold their maximum more than once.
        self.y_pred = rng.integers(0, 4, size=(6, 7, 9)).astype("float32")
        self.y_true = rng.integers(0, 9, size=(6, 7))
        best = self.y_pred.argmax(-1)
        self.y_true[0] = best[0]  # first maxima: correct
        self.y_pred[1, :, 8] = 9.0
        self.y_true[1] = 8  # a maximum at the last column
        self.expected = (self.y_pred.argmax(-1) == self.y_true).astype("float32")
        later = np.argmax(self.y_pred[..., ::-1], -1)
        self.y_true[2] = 8 - later[2]  # the last of equal maxima: wrong where not also first
        self.expected[2] = (self.y_pred[2].argmax(-1) == self.y_true[2])

    def test_matches_numpy_argmax_with_ties(self):
        self.assertTrue(0 < self.expected.mean() < 1)
        for y_true in (self.y_true, self.y_true.astype("float32"), self.y_true[..., None]):
            values = keras.ops.convert_to_numpy(jit(sparse_categorical_accuracy)(
                y_true, self.y_pred))
            np.testing.assert_array_equal(values, self.expected)

    def test_the_same_as_keras_metric_with_weights(self):
        weights = np.random.default_rng(1).uniform(size=self.y_true.shape).astype("float32")
        ours, theirs = (SparseCategoricalAccuracy(name="accuracy"),
                        keras.metrics.SparseCategoricalAccuracy(name="accuracy"))
        for metric in (ours, theirs):
            metric.update_state(self.y_true, self.y_pred, sample_weight=weights)
        self.assertAlmostEqual(float(ours.result()), float(theirs.result()), places=6)
        restored = SparseCategoricalAccuracy.from_config(ours.get_config())
        self.assertEqual((restored.name, restored._fn), ("accuracy", sparse_categorical_accuracy))


def jit(function):
    """`function` compiled the way a training step would run it on the current backend."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(function)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(function)
    return function


if __name__ == "__main__":
    unittest.main()
