"""Tests of Dense: Keras' outputs, and a bias gradient summed at float32 precision."""

import os
import tempfile
import unittest
from unittest import mock

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from psmm_tf import testing
from psmm_tf.layers import Dense, dense
from psmm_tf.layers.dense import affine, weight_gradient


def _bias_gradient(layer, inputs, output_gradient):
    """d(sum(outputs * output_gradient)) / d bias, on any backend."""
    if keras.backend.backend() == "tensorflow":
        with tf.GradientTape() as tape:
            outputs = layer(inputs)
            objective = tf.reduce_sum(tf.cast(outputs, tf.float32) * output_gradient)
        return np.asarray(tape.gradient(objective, layer.bias), np.float64)
    if keras.backend.backend() == "jax":
        import jax

        def objective(bias):
            outputs, _ = layer.stateless_call([layer.kernel.value, bias], [], inputs)
            return (outputs.astype("float32") * output_gradient).sum()

        return np.asarray(jax.grad(objective)(layer.bias.value), np.float64)
    raise unittest.SkipTest("TensorFlow and JAX only")


def _traced_gradient(layer, inputs, output_gradient, variable):
    """d(sum(outputs * output_gradient)) / d variable, traced (`tf.function`)."""

    @tf.function
    def gradient(inputs):
        with tf.GradientTape() as tape:
            outputs = layer(inputs)
            objective = tf.reduce_sum(tf.cast(outputs, tf.float32) * output_gradient)
        return tape.gradient(objective, variable)

    return gradient(inputs)


class DenseTest(testing.TestCase):

    def _pair(self, dtype, activation=None):
        ours = Dense(6, activation=activation, dtype=dtype)
        theirs = keras.layers.Dense(6, activation=activation, dtype=dtype)
        ours.build((None, 5))
        theirs.build((None, 5))
        ours.set_weights([self.rng.normal(size=(5, 6)), self.rng.normal(size=(6,))])
        theirs.set_weights(ours.get_weights())
        return ours, theirs

    def test_outputs_are_keras_dense_outputs(self):
        inputs = self.rng.normal(size=(3, 4, 5)).astype("float32")
        for dtype in ("float32", "mixed_bfloat16", "mixed_float16"):
            for activation in (None, "sigmoid"):
                ours, theirs = self._pair(dtype, activation)
                got, want = ours(inputs), theirs(inputs)
                self.assertEqual(keras.backend.standardize_dtype(got.dtype),
                                 keras.backend.standardize_dtype(want.dtype))
                self.assertAllClose(ops.cast(got, "float32"), ops.cast(want, "float32"),
                                    rtol=1e-6, atol=1e-6)

    def test_bfloat16_bias_gradient_is_the_float_sum_of_the_rows(self):
        # 700 rows, the shape of a medium batch's logits: a column of -0.5 (a frequent
        # target) sums to -350; Keras' bias_add gradient on TensorFlow gives -128 (it sums in
        # bfloat16), and 4e-5-sized terms lost 11% of their sum.
        output_gradient = self.rng.random((700, 40)).astype("float32") * 2e-4
        output_gradient[:, 0] -= 0.5
        # The gradient reaching the bias is the bfloat16 rounding of output_gradient.
        rounded = np.asarray(ops.cast(ops.cast(output_gradient, "bfloat16"), "float32"))
        want = rounded.astype(np.float64).sum(axis=0)
        layer = Dense(40, dtype="mixed_bfloat16")
        layer.build((None, 8))
        inputs = self.rng.normal(size=(700, 8)).astype("float32")
        got = _bias_gradient(layer, inputs, rounded)
        self.assertAllClose(got[0], -350.0, rtol=2 ** -8)
        # One bfloat16 rounding of the float sum (relative 2^-9), and no more.
        self.assertAllClose(got, want, rtol=2 ** -8, atol=0.0)

    def test_bfloat16_bias_gradient_of_3d_inputs_in_a_graph(self):
        # Traced, the bias is fused into the flattened product (`affine`); its gradient is
        # still the float sum of the (20, 35) rows.
        if keras.backend.backend() != "tensorflow":
            self.skipTest("TensorFlow's graph optimizer")
        output_gradient = self.rng.random((20, 35, 40)).astype("float32") * 2e-4
        output_gradient[..., 0] -= 0.5
        rounded = tf.cast(tf.cast(output_gradient, tf.bfloat16), tf.float32)
        want = rounded.numpy().astype(np.float64).sum(axis=(0, 1))
        layer = Dense(40, dtype="mixed_bfloat16")
        layer.build((None, None, 8))
        inputs = self.rng.normal(size=(20, 35, 8)).astype("float32")

        got = _traced_gradient(layer, inputs, rounded, layer.bias).numpy()
        self.assertAllClose(got[0], -350.0, rtol=2 ** -8)
        self.assertAllClose(got, want, rtol=2 ** -8, atol=0.0)

    def test_saves_and_loads_in_a_keras_model(self):
        inputs = keras.Input((5,))
        model = keras.Model(inputs, Dense(3, activation="tanh", name="head")(inputs))
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "model.keras")
            model.save(path)
            loaded = keras.models.load_model(path)
        self.assertIsInstance(loaded.get_layer("head"), Dense)
        x = self.rng.normal(size=(2, 5)).astype("float32")
        self.assertAllClose(loaded(x), model(x))


class AffineTest(testing.TestCase):
    def test_is_the_product_plus_the_bias_at_every_rank(self):
        kernel = self.rng.normal(size=(5, 6)).astype("float32")
        bias = self.rng.normal(size=(6,)).astype("float32")
        for shape in ((4, 5), (3, 4, 5), (2, 3, 4, 5)):
            inputs = self.rng.normal(size=shape).astype("float32")
            product = inputs.astype(np.float64) @ kernel
            got = affine(inputs, kernel, bias)
            self.assertEqual(tuple(got.shape), shape[:-1] + (6,))
            self.assertAllClose(got, product + bias, rtol=1e-5, atol=1e-5)
            self.assertAllClose(affine(inputs, kernel), product, rtol=1e-5, atol=1e-5)

    def test_traced_for_any_length_keeps_the_known_dimensions(self):
        if keras.backend.backend() != "tensorflow":
            self.skipTest("a TensorFlow graph of unknown dimensions")
        kernel = self.rng.normal(size=(5, 6)).astype("float32")
        bias = self.rng.normal(size=(6,)).astype("float32")
        traced = tf.function(lambda x: affine(x, kernel, bias),
                             input_signature=[tf.TensorSpec((None, 7, 5))])
        self.assertEqual(traced.get_concrete_function().structured_outputs.shape.as_list(),
                         [None, 7, 6])
        inputs = self.rng.normal(size=(3, 7, 5)).astype("float32")
        self.assertAllClose(traced(inputs), inputs.astype(np.float64) @ kernel + bias,
                            rtol=1e-5, atol=1e-5)


class WeightGradientTest(testing.TestCase):
    def setUp(self):
        super().setUp()
        if keras.backend.backend() != "tensorflow":
            self.skipTest("TensorFlow's weight gradient")

    def test_both_forms_are_the_inputs_transposed_times_the_output_gradient(self):
        inputs = self.rng.normal(size=(70, 13)).astype("float32")
        grad_outputs = self.rng.normal(size=(70, 29)).astype("float32")
        for transposed in (False, True):
            with mock.patch.object(dense, "_transposed_form",
                                   lambda dtype, form=transposed: form):
                for dtype in (tf.float32, tf.bfloat16, tf.float16):
                    x, dy = tf.cast(inputs, dtype), tf.cast(grad_outputs, dtype)
                    # The float64 product of the rounded operands; the output rounds once.
                    want = tf.cast(x, tf.float64).numpy().T @ tf.cast(dy, tf.float64).numpy()
                    got = weight_gradient(x, dy)
                    self.assertEqual(got.dtype, dtype)
                    self.assertEqual(tuple(got.shape), (13, 29))
                    tolerance = {tf.float32: 1e-5, tf.bfloat16: 2 ** -7,
                                 tf.float16: 2 ** -10}[dtype]
                    self.assertAllClose(tf.cast(got, tf.float64), want, rtol=tolerance,
                                        atol=tolerance * np.abs(want).max())

    def test_the_transposed_form_is_taken_for_bfloat16_only(self):
        with mock.patch.object(dense, "_cpu_has_bfloat16_products", lambda: True):
            self.assertTrue(dense._transposed_form(tf.bfloat16)
                            or bool(tf.config.list_logical_devices("GPU")))
            self.assertFalse(dense._transposed_form(tf.float32))
            self.assertFalse(dense._transposed_form(tf.float16))
        with mock.patch.object(dense, "_cpu_has_bfloat16_products", lambda: False):
            self.assertFalse(dense._transposed_form(tf.bfloat16))

    def test_is_the_kernel_gradient_of_a_bfloat16_layer_in_a_graph(self):
        # The layer's kernel gradient (through the autocast read, to the float32 variable)
        # is the float64 X^T dY of the bfloat16 operands, to bfloat16 rounding, in the form
        # this CPU takes.
        layer = Dense(40, dtype="mixed_bfloat16")
        layer.build((None, None, 8))
        inputs = self.rng.normal(size=(20, 35, 8)).astype("float32")
        output_gradient = self.rng.normal(size=(20, 35, 40)).astype("float32")

        kernel_gradient = _traced_gradient(layer, inputs, output_gradient, layer.kernel)
        self.assertEqual(kernel_gradient.dtype, tf.float32)
        x = tf.cast(tf.cast(inputs, tf.bfloat16), tf.float64).numpy().reshape(-1, 8)
        dy = tf.cast(tf.cast(output_gradient, tf.bfloat16), tf.float64).numpy().reshape(-1, 40)
        want = x.T @ dy
        self.assertAllClose(kernel_gradient, want, rtol=2 ** -7,
                            atol=2 ** -7 * np.abs(want).max())


if __name__ == "__main__":
    tf.test.main()
