"""Tests of PointerSentinel against the paper's equations (NumPy loops) and a hand-worked case."""

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from keras import ops

from psmm_tf import testing
from psmm_tf.layers import PointerSentinel


def _layer_weights(layer):
    return (layer.query_kernel.numpy(), layer.query_bias.numpy(), layer.sentinel.numpy())


class PointerSentinelTest(testing.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("no_memory_short_window", 0, 5, 3),
        ("no_memory_window_longer_than_sequence", 0, 4, 9),
        ("memory_window_shorter", 6, 5, 4),
        ("memory_window_covers_all", 3, 4, 10),
        ("window_of_one", 2, 3, 1),
    )
    def test_matches_numpy_equations(self, num_memory, steps, window_size):
        batch, dim = 3, 6
        hidden = self.rng.normal(size=(batch, steps, dim)).astype("float32")
        memory = self.rng.normal(size=(batch, num_memory, dim)).astype("float32")
        memory_mask = self.rng.random((batch, num_memory)) > 0.3
        layer = PointerSentinel(window_size, sentinel_initializer="random_normal")
        if num_memory:
            attention, gate = layer(hidden, memory=memory, memory_mask=memory_mask)
        else:
            attention, gate = layer(hidden)
            memory, memory_mask = None, None
        expected_attention, expected_gate = testing.reference_pointer_sentinel(
            hidden, memory, memory_mask, *_layer_weights(layer), window_size
        )
        self.assertAllClose(attention, expected_attention, atol=1e-5)
        self.assertAllClose(gate, expected_gate, atol=1e-5)
        self.assertAllClose(np.sum(attention, -1) + gate, np.ones((batch, steps)), atol=1e-6)

    def test_hand_worked_case(self):
        # D = 1, W = 1, b = 0, s = 0: q = tanh(h), z_i = q h_i, sentinel score 0. Keys h = 1, 2.
        layer = PointerSentinel(
            window_size=2, kernel_initializer="ones", sentinel_initializer="zeros"
        )
        attention, gate = layer(np.array([[[1.0], [2.0]]], "float32"))
        # Position 0: softmax([tanh(1) * 1, 0]).
        # Position 1: softmax([tanh(2) * 1, tanh(2) * 2, 0]).
        self.assertAllClose(attention[0], [[0.68169974, 0.0], [0.24977580, 0.65497123]])
        self.assertAllClose(gate[0], [0.31830026, 0.09525297])

    def test_keys_outside_window_and_later_keys_get_zero_attention(self):
        hidden = self.rng.normal(size=(2, 7, 4)).astype("float32")
        attention, _ = PointerSentinel(window_size=3)(hidden)
        attention = np.asarray(attention)
        for t in range(7):
            for k in range(7):
                if not t - 3 < k <= t:
                    self.assertEqual(attention[0, t, k], 0.0, msg=f"query {t}, key {k}")
                else:
                    self.assertGreater(attention[0, t, k], 0.0, msg=f"query {t}, key {k}")

    def test_masked_memory_is_never_attended(self):
        hidden = self.rng.normal(size=(1, 2, 4)).astype("float32")
        memory = 100.0 * np.ones((1, 3, 4), "float32")  # would dominate if attended
        mask = np.array([[False, True, False]])
        attention, gate = PointerSentinel(window_size=5)(hidden, memory=memory, memory_mask=mask)
        self.assertAllEqual(np.asarray(attention)[0, :, [0, 2]], np.zeros((2, 2)))
        self.assertAllClose(np.sum(attention, -1) + gate, np.ones((1, 2)))

    def test_only_query_weights_and_sentinel_are_parameters(self):
        layer = PointerSentinel(window_size=4)
        layer(np.zeros((1, 2, 7), "float32"))
        self.assertEqual(layer.count_params(), 7 * 7 + 2 * 7)
        self.assertEqual(
            sorted(w.name for w in layer.weights), ["query_bias", "query_kernel", "sentinel"]
        )

    def test_gradients_match_finite_differences(self):
        dtype, delta, tolerance = testing.gradient_check_settings()
        hidden = self.rng.normal(size=(1, 3, 3)).astype(dtype)
        memory = self.rng.normal(size=(1, 2, 3)).astype(dtype)
        layer = PointerSentinel(window_size=3, dtype=dtype)
        layer(hidden, memory=memory)
        position_weights = np.arange(1.0, 6.0).astype(dtype)

        def weighted_output(hidden, memory, *weights):
            (attention, gate), _ = layer.stateless_call(weights, [], hidden, memory=memory)
            return ops.sum(attention * position_weights) + ops.sum(gate * gate)

        # The inputs and the weights W, b, s.
        args = [hidden, memory, *(w.numpy() for w in layer.trainable_weights)]
        _, analytic = testing.value_and_gradients(weighted_output, args)
        numeric = testing.numerical_gradients(weighted_output, args, delta=delta)
        for a, n in zip(analytic, numeric, strict=True):
            self.assertAllClose(a, n, atol=tolerance, rtol=tolerance)

    def test_compiled_matches_eager(self):
        hidden = self.rng.normal(size=(2, 5, 4)).astype("float32")
        memory = self.rng.normal(size=(2, 4, 4)).astype("float32")
        mask = self.rng.random((2, 4)) > 0.5
        layer = PointerSentinel(window_size=4)
        eager = layer(hidden, memory=memory, memory_mask=mask)
        compiled = testing.compiled(
            lambda h, m, k: layer(h, memory=m, memory_mask=k)
        )(hidden, memory, mask)
        for a, b in zip(eager, compiled):
            self.assertAllClose(a, b, atol=1e-6)

    def test_config_round_trip(self):
        layer = PointerSentinel(window_size=7, name="ptr", initial_gate=0.8)
        clone = PointerSentinel.from_config(layer.get_config())
        self.assertEqual(clone.window_size, 7)
        self.assertEqual(clone.name, "ptr")
        self.assertEqual(clone.initial_gate, 0.8)

    def test_initial_gate(self):
        # Zero hidden states: q = tanh(b) = tanh(0.5) in every unit, every key scores 0, and
        # q . s is the score giving the sentinel g0 against L keys (eq. 7-8), whatever the noise.
        window, dim = 6, 5
        for g0 in (0.5, 0.9, 0.99):
            layer = PointerSentinel(window_size=window, initial_gate=g0)
            _, gate = layer(np.zeros((2, 9, dim), np.float32))
            self.assertAllClose(gate[:, window - 1:], np.full((2, 9 - window + 1), g0),
                                atol=1e-5)
            # Fewer keys before the window fills: the gate is higher.
            self.assertAllClose(gate[:, 0], np.full(2, g0 / (g0 + (1 - g0) / window)),
                                atol=1e-5)
            self.assertAllClose(layer.query_bias.numpy(), np.full(dim, 0.5))
        # The paper's initialisation: every score near 0, the gate near 1 / (L + 1).
        _, gate = PointerSentinel(window_size=window)(np.zeros((1, 9, dim), np.float32))
        self.assertAllClose(gate[:, window - 1:], np.full((1, 4), 1 / (window + 1)), atol=1e-6)

    def test_gate_calibration_is_platt_scaling_of_the_gate_logit(self):
        # g' = sigmoid(scale * logit(g) + bias), a'_i = a_i (1 - g') / (1 - g): NumPy from the
        # uncalibrated layer's outputs, with memory and a window shorter than the keys.
        hidden = self.rng.normal(size=(2, 5, 4)).astype("float32")
        memory = self.rng.normal(size=(2, 3, 4)).astype("float32")
        mask = np.array([[False, True, True], [True, True, True]])
        plain = PointerSentinel(window_size=4, sentinel_initializer="random_normal")
        attention, gate = (np.asarray(x, np.float64)
                           for x in plain(hidden, memory=memory, memory_mask=mask))
        for scale, bias in ((0.4, 0.7), (1.0, 0.0), (2.5, -1.0), (0.0, 1.5)):
            layer = PointerSentinel(window_size=4, gate_calibration=(scale, bias))
            layer.build(hidden.shape)
            layer.set_weights(plain.get_weights())
            new_attention, new_gate = layer(hidden, memory=memory, memory_mask=mask)
            expected_gate = 1 / (1 + np.exp(-(scale * np.log(gate / (1 - gate)) + bias)))
            self.assertAllClose(new_gate, expected_gate, atol=1e-5)
            self.assertAllClose(
                new_attention, attention * ((1 - expected_gate) / (1 - gate))[..., None],
                atol=1e-5)
            self.assertAllClose(np.sum(new_attention, -1) + new_gate, np.ones((2, 5)), atol=1e-5)
        # Scale 0: the gate no longer depends on the text.
        self.assertAllClose(new_gate, np.full((2, 5), 1 / (1 + np.exp(-1.5))), atol=1e-6)

    def test_gate_calibration_config_and_checks(self):
        layer = PointerSentinel(window_size=3, gate_calibration=[0.5, -1])
        self.assertEqual(layer.gate_calibration, (0.5, -1.0))
        clone = PointerSentinel.from_config(layer.get_config())
        self.assertEqual(clone.gate_calibration, (0.5, -1.0))
        self.assertIsNone(PointerSentinel(window_size=3).get_config()["gate_calibration"])
        for bad in ((-0.1, 0.0), (1.0,), (1.0, float("nan")), "ab", 3.0):
            with self.assertRaisesRegex(ValueError, "gate_calibration must be"):
                PointerSentinel(window_size=3, gate_calibration=bad)

    def test_rejects_bad_window_size(self):
        for bad in (0, -3, 2.5, None):
            with self.assertRaisesRegex(ValueError, "window_size must be an integer >= 1"):
                PointerSentinel(window_size=bad)
        for bad in (0.0, 1.0, -0.5):
            with self.assertRaisesRegex(ValueError, "initial_gate must be in"):
                PointerSentinel(window_size=3, initial_gate=bad)

    def test_rejects_bad_shapes(self):
        layer = PointerSentinel(window_size=2)
        with self.assertRaisesRegex(ValueError, "`hidden` must have rank 3"):
            layer(np.zeros((2, 4), "float32"))
        with self.assertRaisesRegex(ValueError, "`memory`.*must equal.*`hidden`"):
            layer(np.zeros((2, 3, 4), "float32"), memory=np.zeros((2, 5, 6), "float32"))
        with self.assertRaisesRegex(ValueError, "`memory_mask`.*must equal.*`memory`"):
            layer(np.zeros((2, 3, 4), "float32"), memory=np.zeros((2, 5, 4), "float32"),
                  memory_mask=np.ones((2, 4), bool))
        with self.assertRaisesRegex(ValueError, "`memory_mask` was given without `memory`"):
            layer(np.zeros((2, 3, 4), "float32"), memory_mask=np.ones((2, 4), bool))

    def test_works_inside_a_functional_model(self):
        hidden = keras.Input((None, 6))
        attention, gate = PointerSentinel(window_size=3)(hidden)
        model = keras.Model(hidden, [attention, gate])
        out = model(np.ones((2, 4, 6), "float32"))
        self.assertEqual(tuple(out[0].shape), (2, 4, 4))
        self.assertEqual(tuple(out[1].shape), (2, 4))


if __name__ == "__main__":
    tf.test.main()
