"""`product` on JAX against `jnp.matmul` and JAX's automatic gradient of it, and the
gradients against float64 NumPy."""

import unittest

import numpy as np

jax = __import__("pytest").importorskip("jax")
jnp = jax.numpy

from psmm_tf.layers.product_jax import product  # noqa: E402


def _value_and_grads(function, inputs, kernel, weights):
    def total(inputs, kernel):
        outputs = function(inputs, kernel)
        return jnp.sum(outputs.astype(jnp.float32) * weights), outputs

    (_, outputs), grads = jax.jit(jax.value_and_grad(total, argnums=(0, 1), has_aux=True))(
        inputs, kernel)
    return outputs, grads


class ProductJaxTest(unittest.TestCase):

    def setUp(self):
        rng = np.random.default_rng(0)
        self.inputs = rng.normal(size=(3, 5, 7)).astype("float32")
        self.kernel = rng.normal(size=(7, 11)).astype("float32")
        self.weights = rng.normal(size=(3, 5, 11)).astype("float32")

    def test_value_and_gradients_match_numpy_and_jax(self):
        outputs, (d_inputs, d_kernel) = _value_and_grads(product, self.inputs, self.kernel,
                                                         self.weights)
        x, w, dy = (a.astype(np.float64) for a in (self.inputs, self.kernel, self.weights))
        np.testing.assert_allclose(outputs, x @ w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(d_inputs, dy @ w.T, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(d_kernel, x.reshape(-1, 7).T @ dy.reshape(-1, 11),
                                   rtol=1e-5, atol=1e-5)
        plain_outputs, plain_grads = _value_and_grads(jnp.matmul, self.inputs, self.kernel,
                                                      self.weights)
        np.testing.assert_array_equal(outputs, plain_outputs)
        for grad, plain in zip((d_inputs, d_kernel), plain_grads, strict=True):
            np.testing.assert_allclose(grad, plain, rtol=1e-6, atol=1e-6)

    def test_bfloat16_in_bfloat16_out(self):
        inputs, kernel = (jnp.asarray(a, jnp.bfloat16) for a in (self.inputs, self.kernel))
        outputs, (d_inputs, d_kernel) = _value_and_grads(product, inputs, kernel, self.weights)
        self.assertEqual({str(a.dtype) for a in (outputs, d_inputs, d_kernel)}, {"bfloat16"})
        _, (plain_inputs, plain_kernel) = _value_and_grads(jnp.matmul, inputs, kernel,
                                                           self.weights)
        np.testing.assert_allclose(np.asarray(d_kernel, np.float32),
                                   np.asarray(plain_kernel, np.float32), rtol=2e-2, atol=2e-2)


if __name__ == "__main__":
    unittest.main()
