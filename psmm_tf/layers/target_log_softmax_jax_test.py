"""`target_log_softmax` on JAX against `log softmax(z)[y]` and its gradient
`dy (one_hot(y) - softmax(z))` in float64 NumPy, and against JAX's automatic gradient."""

import unittest

import numpy as np

jax = __import__("pytest").importorskip("jax")
jnp = jax.numpy

from psmm_tf import testing  # noqa: E402
from psmm_tf.layers.target_log_softmax_jax import target_log_softmax  # noqa: E402

V = 50


def _plain(logits, targets):
    """The same function as JAX differentiates it without the custom backward pass."""
    target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return target_logit - jax.nn.logsumexp(logits, axis=-1)


class TargetLogSoftmaxJaxTest(unittest.TestCase):

    def setUp(self):
        rng = np.random.default_rng(0)
        # Rows of moderate logits, one far-off row (a target 80 nats down), repeated targets.
        self.logits = rng.normal(scale=3.0, size=(3, 4, V)).astype("float32")
        self.logits[1, 2, :] = 0.0
        self.logits[1, 2, 7] = 80.0
        self.targets = rng.integers(0, V, size=(3, 4)).astype("int32")
        self.targets[1, 2] = 3
        self.targets[2, :] = 5
        self.d_value = rng.normal(size=(3, 4)).astype("float32")

    def _value_and_gradient(self, function):
        def total(logits):
            value = function(logits, jnp.asarray(self.targets))
            return jnp.sum(value * self.d_value), value

        (_, value), grad = jax.jit(jax.value_and_grad(total, has_aux=True))(
            jnp.asarray(self.logits))
        return np.asarray(value), np.asarray(grad)

    def test_value_and_gradient_match_float64_numpy(self):
        value, grad = self._value_and_gradient(target_log_softmax)
        expected_value, expected_grad = testing.reference_target_log_softmax(
            self.logits, self.targets, self.d_value)
        np.testing.assert_allclose(value, expected_value, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(grad, expected_grad, atol=1e-6)
        self.assertEqual(grad.dtype, np.float32)

    def test_the_same_numbers_as_the_automatic_gradient(self):
        value, grad = self._value_and_gradient(target_log_softmax)
        plain_value, plain_grad = self._value_and_gradient(_plain)
        np.testing.assert_array_equal(value, plain_value)
        np.testing.assert_allclose(grad, plain_grad, atol=1e-7)

    def test_bfloat16_logits_give_a_bfloat16_gradient(self):
        logits = jnp.asarray(self.logits, jnp.bfloat16)
        grad = jax.grad(lambda z: jnp.sum(target_log_softmax(z, jnp.asarray(self.targets))
                                          .astype(jnp.float32)))(logits)
        self.assertEqual(grad.dtype, jnp.bfloat16)
        _, expected = testing.reference_target_log_softmax(
            np.asarray(logits, np.float32), self.targets, np.ones_like(self.d_value))
        np.testing.assert_allclose(np.asarray(grad, np.float32), expected, atol=2e-2)


if __name__ == "__main__":
    unittest.main()
