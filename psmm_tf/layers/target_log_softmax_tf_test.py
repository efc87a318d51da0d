"""`target_log_softmax` on TensorFlow, as TensorFlow ops and as the native kernels, against
`log softmax(z)[y]` and its gradient `dy (one_hot(y) - softmax(z))` in float64 NumPy."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from psmm_tf import native, testing
from psmm_tf.layers.target_log_softmax_tf import target_log_softmax

V = 50



def _paths(test):
    """The ops path, and the native one where a compiler is present (it must build)."""
    paths = [False]
    if testing.has_cxx_compiler():
        test.assertIsNotNone(native.library(), "the native kernels failed to build")
        paths.append(True)
    return paths


def _value_and_gradient(logits, targets, d_value, fused):
    with tf.GradientTape() as tape:
        tape.watch(logits)
        value = target_log_softmax(logits, targets, fused=fused)
        total = tf.reduce_sum(value * d_value)
    return value, tape.gradient(total, logits)


@testing.skip_unless_tensorflow("the TensorFlow log-softmax and its native kernels")
class TargetLogSoftmaxTest(testing.TestCase, parameterized.TestCase):

    # Values in float32 from logits of each dtype; gradients in the logits' dtype, so to
    # its rounding (bfloat16 keeps 8 bits, float16 11).
    @parameterized.named_parameters(("float32", tf.float32, 2e-6),
                                    ("bfloat16", tf.bfloat16, 2e-2),
                                    ("float16", tf.float16, 2e-3))
    def test_value_and_gradient_equal_numpy(self, dtype, gradient_rtol):
        logits = tf.cast(self.rng.normal(size=(2, 3, V)) * 4.0, dtype)
        targets = self.rng.integers(0, V, size=(2, 3)).astype("int32")
        d_value = self.rng.normal(size=(2, 3)).astype("float32")
        expected_value, expected_gradient = testing.reference_target_log_softmax(
            tf.cast(logits, tf.float64), targets, d_value)
        for fused in _paths(self):
            with self.subTest(fused=fused):
                value, gradient = _value_and_gradient(logits, targets, d_value, fused)
                self.assertEqual(value.dtype, tf.float32)
                self.assertEqual(gradient.dtype, dtype)
                self.assertAllClose(value, expected_value, atol=1e-5, rtol=1e-6)
                self.assertAllClose(tf.cast(gradient, tf.float64), expected_gradient,
                                    atol=1e-6, rtol=gradient_rtol)

    def test_both_paths_take_a_target_far_below_float_range_exactly(self):
        # Probabilities e^-100 and e^-300 (the second is 0 in float32): z_y - logsumexp(z).
        logits = self.rng.normal(size=(2, V)).astype("float32")
        targets = np.array([1, 5], "int32")
        logits[0, 1] = logits[0].max() - 100.0
        logits[1, 5] = logits[1].max() - 300.0
        d_value = np.ones(2, "float32")
        expected_value, expected_gradient = testing.reference_target_log_softmax(
            logits, targets, d_value)
        for fused in _paths(self):
            with self.subTest(fused=fused):
                value, gradient = _value_and_gradient(tf.constant(logits), targets, d_value,
                                                      fused)
                self.assertAllClose(value, expected_value, atol=0, rtol=1e-6)
                self.assertAllClose(gradient, expected_gradient, atol=1e-6)

    def test_a_nan_logit_makes_its_row_nan_on_both_paths(self):
        logits = self.rng.normal(size=(3, V)).astype("float32")
        logits[1, 7] = np.nan
        for fused in _paths(self):
            with self.subTest(fused=fused):
                value, gradient = _value_and_gradient(tf.constant(logits),
                                                      np.array([0, 1, 2], "int32"),
                                                      np.ones(3, "float32"), fused)
                self.assertTrue(np.isnan(value[1]))
                self.assertTrue(np.all(np.isfinite(value.numpy()[[0, 2]])))
                self.assertTrue(np.any(np.isnan(gradient[1])))
                self.assertTrue(np.all(np.isfinite(gradient.numpy()[[0, 2]])))

    def test_native_kernels_refuse_bad_inputs_naming_them(self):
        if not testing.has_cxx_compiler():
            self.skipTest("no C++ compiler: the native kernels are not built")
        library = native.library()
        logits = tf.zeros((3, V))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"targets must be in \[0, 50\), got 50 at row 2"):
            library.psmm_target_log_softmax(logits, tf.constant([0, 1, V]))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r"got -1 at row 0"):
            library.psmm_target_log_softmax(logits, tf.constant([-1, 1, 2]))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r"input 1 must be \(3\)"):
            library.psmm_target_log_softmax(logits, tf.constant([0, 1]))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r"logits must be"):
            library.psmm_target_log_softmax(tf.zeros((3, 0)), tf.constant([0, 0, 0]))
        rows = tf.zeros(3)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r"input 4 must be \(3\)"):
            library.psmm_target_log_softmax_grad(logits, tf.constant([0, 1, 2]), rows, rows,
                                                 tf.zeros(4))

    def test_native_kernels_only_in_graphs_traced_inside_enabled(self):
        # As the native cell's: never in an export's graph (traced outside `enabled()`), nor
        # under XLA, which has no kernel for them; float64 logits take TensorFlow's ops.
        logits = tf.constant(self.rng.normal(size=(4, V)).astype("float32"))
        targets = tf.constant([0, 1, 2, 3])

        def native_ops(logits, jit_compile=False):
            def loss(logits):
                with tf.GradientTape() as tape:
                    tape.watch(logits)
                    total = tf.reduce_sum(target_log_softmax(logits, targets))
                return tape.gradient(total, logits)

            graph = tf.function(loss, jit_compile=jit_compile).get_concrete_function(
                logits).graph
            return sorted({op.type for op in graph.get_operations()
                           if op.type.startswith("Psmm")})

        self.assertEqual(native_ops(logits), [])
        with native.enabled(jit_compile=True):  # the step says it is XLA-compiled
            self.assertEqual(native_ops(logits, jit_compile=True), [])
        with native.enabled():
            self.assertEqual(native_ops(tf.cast(logits, tf.float64)), [])
            if testing.has_cxx_compiler():
                self.assertEqual(native_ops(logits),
                                 ["PsmmTargetLogSoftmax", "PsmmTargetLogSoftmaxGrad"])
            with native.disabled():
                self.assertEqual(native_ops(logits), [])


if __name__ == "__main__":
    tf.test.main()
