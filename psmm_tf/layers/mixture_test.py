"""Tests of the mixture ops against dense NumPy versions of eq. 3 and 9 and a hand-worked case."""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from psmm_tf import testing
from psmm_tf.layers import (
    PointerSentinel,
    checked_ids,
    mixture_distribution,
    mixture_log_prob,
    pointer_loss,
    vocab_log_prob,
)


class MixtureTest(testing.TestCase):

    def _random_case(self, batch=2, steps=5, num_memory=3, vocab=11, window=4):
        dim = 4
        hidden = self.rng.normal(size=(batch, steps, dim)).astype("float32")
        memory = self.rng.normal(size=(batch, num_memory, dim)).astype("float32")
        attention, gate = PointerSentinel(window)(hidden, memory=memory)
        # Few distinct ids so that words repeat inside windows (several keys per word).
        key_ids = self.rng.integers(0, 4, size=(batch, num_memory + steps)).astype("int32")
        logits = self.rng.normal(size=(batch, steps, vocab)).astype("float32")
        targets = self.rng.integers(0, 6, size=(batch, steps)).astype("int32")
        return logits, np.asarray(attention), np.asarray(gate), key_ids, targets

    def test_log_prob_matches_dense_reference(self):
        logits, attention, gate, key_ids, targets = self._random_case()
        expected = testing.reference_mixture_log_prob(logits, attention, gate, key_ids, targets)
        actual = mixture_log_prob(logits, attention, gate, key_ids, targets)
        self.assertAllClose(actual, expected, atol=1e-5)

    def test_distribution_matches_reference_and_sums_to_one(self):
        logits, attention, gate, key_ids, _ = self._random_case()
        dist = np.asarray(mixture_distribution(logits, attention, gate, key_ids))
        expected = testing.reference_mixture_distribution(logits, attention, gate, key_ids)
        self.assertAllClose(dist, expected, atol=1e-6)
        self.assertAllClose(dist.sum(-1), np.ones(dist.shape[:2]), atol=1e-5)

    def test_distribution_agrees_with_log_prob_for_every_word(self):
        logits, attention, gate, key_ids, _ = self._random_case(vocab=7)
        dist = np.asarray(mixture_distribution(logits, attention, gate, key_ids))
        for word in range(7):
            targets = np.full(gate.shape, word, "int32")
            log_p = mixture_log_prob(logits, attention, gate, key_ids, targets)
            self.assertAllClose(np.exp(log_p), dist[..., word], atol=1e-6)

    def test_pointer_loss_matches_reference(self):
        _, attention, gate, key_ids, targets = self._random_case()
        expected = testing.reference_pointer_loss(attention, gate, key_ids, targets)
        self.assertAllClose(pointer_loss(attention, gate, key_ids, targets), expected, atol=1e-5)

    def test_hand_worked_case(self):
        # Attention and gate of the PointerSentinel hand-worked case; V = 3 uniform logits;
        # key 0 holds word 2, key 1 holds word 1.
        attention = np.array([[[0.68169974, 0.0], [0.24977580, 0.65497123]]], "float32")
        gate = np.array([[0.31830026, 0.09525297]], "float32")
        key_ids = np.array([[2, 1]], "int32")
        logits = np.zeros((1, 2, 3), "float32")
        targets = np.array([[0, 2]], "int32")
        # Position 0, word 0: only the softmax, g / 3. Position 1, word 2: g / 3 + a_0.
        expected = np.log([[0.31830026 / 3, 0.09525297 / 3 + 0.24977580]])
        self.assertAllClose(mixture_log_prob(logits, attention, gate, key_ids, targets),
                            expected, atol=1e-6)
        # -log(g + sum of a on the target): word 0 is not in the window, word 2 is at key 0.
        self.assertAllClose(pointer_loss(attention, gate, key_ids, targets),
                            [[-np.log(0.31830026), -np.log(0.09525297 + 0.24977580)]], atol=1e-6)

    def test_target_absent_from_window_has_finite_log_prob_and_gradient(self):
        args = [np.zeros((1, 1, 5), "float32"), np.array([[[0.7, 0.2]]], "float32"),
                np.array([[0.1]], "float32")]

        def log_p(logits, attention, gate):
            return ops.sum(mixture_log_prob(logits, attention, gate, np.array([[1, 2]]),
                                            np.array([[4]])))

        value, grads = testing.value_and_gradients(log_p, args)
        self.assertAllClose(value, np.log(0.1 / 5))
        for grad in grads:
            self.assertTrue(np.all(np.isfinite(grad)))

    def test_vocab_log_prob_and_its_gradient_match_numpy(self):
        # log softmax(z)[y] and its gradient one_hot(y) - softmax(z), written out in NumPy.
        logits = self.rng.normal(size=(2, 3, 7)).astype("float32") * 3.0
        targets = self.rng.integers(0, 7, size=(2, 3)).astype("int32")
        weights = self.rng.normal(size=targets.shape).astype("float32")
        shifted = logits - logits.max(-1, keepdims=True)
        probs = np.exp(shifted) / np.exp(shifted).sum(-1, keepdims=True)
        one_hot = np.eye(7, dtype="float32")[targets]
        expected = np.log((probs * one_hot).sum(-1))

        def f(logits):
            return ops.sum(vocab_log_prob(logits, targets) * weights)

        value, (gradient,) = testing.value_and_gradients(f, [logits])
        self.assertAllClose(vocab_log_prob(logits, targets), expected, atol=1e-5)
        self.assertAllClose(value, (expected * weights).sum(), atol=1e-4)
        self.assertAllClose(gradient, weights[..., None] * (one_hot - probs), atol=1e-5)

    def test_vocab_log_prob_of_a_target_far_below_float_range_is_exact(self):
        # Targets 100 and 300 nats below the row's largest logit (probabilities e^-100 and
        # e^-300: the second is 0 in float32) beside ordinary rows: z_y - logsumexp(z) each,
        # and the gradient one_hot - softmax.
        logits = self.rng.normal(size=(2, 3, 7)).astype("float32")
        targets = np.array([[0, 1, 2], [3, 4, 5]], "int32")
        logits[0, 1, 1] = logits[0, 1].max() - 100.0
        logits[1, 2, 5] = logits[1, 2].max() - 300.0
        rows = logits.astype(np.float64)
        log_sum = np.log(np.exp(rows - rows.max(-1, keepdims=True)).sum(-1)) + rows.max(-1)
        expected = np.take_along_axis(rows, targets[..., None], -1)[..., 0] - log_sum
        probs = np.exp(rows - log_sum[..., None])
        one_hot = np.eye(7)[targets]

        value, (gradient,) = testing.value_and_gradients(
            lambda z: ops.sum(vocab_log_prob(z, targets)), [logits])
        result = np.asarray(ops.convert_to_numpy(vocab_log_prob(logits, targets)))
        self.assertAllClose(result, expected, atol=1e-4, rtol=1e-6)
        self.assertAllClose(value, expected.sum(), rtol=1e-6)
        self.assertAllClose(gradient, one_hot - probs, atol=1e-6)

    def test_vocab_log_prob_of_nan_logits_is_nan(self):
        # A NaN in a row's logits makes that row's value NaN, never a finite loss.
        logits = self.rng.normal(size=(1, 3, 7)).astype("float32")
        logits[0, 1, 4] = np.nan
        result = np.asarray(ops.convert_to_numpy(
            vocab_log_prob(logits, np.array([[0, 1, 2]], "int32"))))
        self.assertTrue(np.isnan(result[0, 1]))
        self.assertTrue(np.all(np.isfinite(result[0, [0, 2]])))

    def test_vocab_log_prob_of_bfloat16_logits_is_computed_in_float32(self):
        # A mixed policy's logits: the log-sum-exp over V is taken in float32, not in 16 bits.
        logits = ops.cast(self.rng.normal(size=(2, 3, 2000)).astype("float32") * 4.0,
                          "bfloat16")
        targets = self.rng.integers(0, 2000, size=(2, 3)).astype("int32")
        rounded = np.asarray(ops.convert_to_numpy(ops.cast(logits, "float32")), np.float64)
        shifted = rounded - rounded.max(-1, keepdims=True)
        expected = (np.take_along_axis(shifted, targets[..., None], -1)[..., 0]
                    - np.log(np.exp(shifted).sum(-1)))
        result = vocab_log_prob(logits, targets)
        self.assertEqual(keras.backend.standardize_dtype(result.dtype), "float32")
        self.assertAllClose(result, expected, atol=2e-5, rtol=0)

    def test_log_prob_gradient_matches_finite_differences(self):
        dtype, delta, tolerance = testing.gradient_check_settings()
        logits, attention, gate, key_ids, targets = self._random_case(steps=3, num_memory=2)
        args = [x.astype(dtype) for x in (logits, attention, gate)]
        # A random weighting of the (B, T) outputs: its gradient checks the whole Jacobian
        # along a random direction.
        weights = self.rng.normal(size=targets.shape).astype(dtype)

        def f(logits, attention, gate):
            log_p = mixture_log_prob(logits, attention, gate, key_ids, targets)
            return ops.sum(log_p * weights)

        _, analytic = testing.value_and_gradients(f, args)
        numeric = testing.numerical_gradients(f, args, delta=10 * delta)
        for a, n in zip(analytic, numeric, strict=True):
            # d log p / d a = 1 / p is large where p is small: compare relatively.
            self.assertAllClose(a, n, rtol=100 * tolerance, atol=10 * tolerance)

    @testing.skip_unless_tensorflow("inspects the TF graph")
    def test_log_prob_builds_no_vocabulary_sized_pointer_tensor(self):
        logits, attention, gate, key_ids, targets = self._random_case(vocab=5003)
        graph = tf.function(mixture_log_prob).get_concrete_function(
            *[tf.TensorSpec(x.shape, x.dtype) for x in (logits, attention, gate, key_ids,
                                                        targets)]
        ).graph
        big = [op for op in graph.get_operations() if op.type not in ("Placeholder",)
               for out in op.outputs if out.shape.rank == 3 and out.shape[-1] == 5003
               and op.type not in ("Cast", "Identity", "ReadVariableOp")]
        # The only [B, T, V] tensors are the logits themselves (passed through the custom
        # gradient's IdentityN on TensorFlow) and a log-sum-exp's intermediates: the target's
        # log-probability is a gather, not a one-hot or a scatter into V (TensorFlow's only
        # scatter writes the (B T,) values of rows taken exactly: target_log_softmax_tf).
        self.assertTrue(all(op.type in ("Sub", "Exp", "Max", "StopGradient", "BroadcastTo",
                                        "IdentityN") for op in big),
                        [op.type for op in big])
        self.assertFalse(any(op.type.startswith(("Scatter", "TensorScatter", "OneHot"))
                             and any(5003 in out.shape for out in op.outputs)
                             for op in graph.get_operations()))

    def test_compiled_matches_eager(self):
        # XLA through tf.function(jit_compile=True) on TF, jax.jit on JAX.
        case = self._random_case()
        eager = mixture_log_prob(*case)
        compiled = testing.compiled(mixture_log_prob)(*case)
        self.assertAllClose(eager, compiled, atol=1e-6)
        dist_eager = mixture_distribution(*case[:4])
        dist_compiled = testing.compiled(mixture_distribution)(*case[:4])
        self.assertAllClose(dist_eager, dist_compiled, atol=1e-6)

    def test_distribution_adds_repeated_ids(self):
        # Three keys hold word 1: their attention adds up in its column.
        attention = np.array([[[0.1, 0.2, 0.3, 0.15]]], "float32")
        gate = np.array([[0.25]], "float32")
        dist = np.asarray(mixture_distribution(np.zeros((1, 1, 4), "float32"), attention, gate,
                                               np.array([[1, 1, 3, 1]], "int32")))
        self.assertAllClose(dist[0, 0], [0.0625, 0.0625 + 0.45, 0.0625, 0.0625 + 0.3],
                            atol=1e-7)

    def test_rejects_ids_outside_the_vocabulary(self):
        logits, attention, gate, key_ids, targets = self._random_case(vocab=11)
        targets[0, 0] = 12
        with self.assertRaisesRegex(
                ValueError, r"`targets` holds an id >= the vocabulary size \(11\): 12"):
            mixture_log_prob(logits, attention, gate, key_ids, targets)
        targets[0, 0] = -3
        with self.assertRaisesRegex(ValueError, "`targets` holds a negative id: -3"):
            mixture_log_prob(logits, attention, gate, key_ids, targets)
        with self.assertRaisesRegex(ValueError,
                                    r"`key_ids` holds an id >= the vocabulary size \(11\)"):
            mixture_distribution(logits, attention, gate, key_ids + 20)

    def test_checked_ids_casts_and_skips_traced_ids(self):
        ids = checked_ids("ids", np.array([[0, 4]], "int64"), 5)
        self.assertEqual(keras.backend.standardize_dtype(ids.dtype), "int32")
        self.assertAllEqual(ids, [[0, 4]])
        # Traced, the values are unknown: no check and no error (inputs of compiled steps
        # are validated where they enter).
        traced = testing.compiled(lambda x: checked_ids("ids", x, 5) + 0)
        self.assertAllEqual(traced(np.array([[7]], "int32")), [[7]])

    def test_rejects_mismatched_shapes(self):
        logits, attention, gate, key_ids, targets = self._random_case()
        with self.assertRaisesRegex(ValueError, "`targets` must have rank 2"):
            mixture_log_prob(logits, attention, gate, key_ids, targets[0])
        with self.assertRaisesRegex(ValueError, "number of keys.*must equal.*key_ids"):
            mixture_log_prob(logits, attention, gate, key_ids[:, 1:], targets)
        with self.assertRaisesRegex(ValueError, "time dimension.*vocab_logits"):
            mixture_log_prob(logits[:, 1:], attention, gate, key_ids, targets)
        with self.assertRaisesRegex(TypeError, "`targets` must be an integer tensor"):
            mixture_log_prob(logits, attention, gate, key_ids, targets.astype("float32"))


if __name__ == "__main__":
    tf.test.main()
