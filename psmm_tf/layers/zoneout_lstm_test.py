"""Tests of ZoneoutLSTM against Keras' LSTM, a NumPy LSTM with zoneout, and its state handling."""

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from psmm_tf import native, testing
from psmm_tf.layers import LockedDropout, ZoneoutLSTM, locked_dropout


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_lstm_step(x, h, c, kernel, recurrent_kernel, bias):
    """One LSTM step, gates in Keras' order (input, forget, cell, output)."""
    z = x @ kernel + h @ recurrent_kernel + bias
    i, f, g, o = np.split(z, 4, axis=-1)
    c_new = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c_new), c_new


class ZoneoutLSTMTest(testing.TestCase):

    def _layer_and_inputs(self, zoneout=0.0, steps=6):
        inputs = self.rng.normal(size=(3, steps, 5)).astype("float32")
        layer = ZoneoutLSTM(4, zoneout=zoneout, seed=3)
        layer.build(inputs.shape)
        layer.bias.assign(self.rng.normal(size=(16,)).astype("float32"))
        return layer, inputs

    def test_without_zoneout_equals_keras_lstm(self):
        layer, inputs = self._layer_and_inputs()
        outputs, (h, c) = layer(inputs)
        reference = keras.layers.LSTM(4, return_sequences=True, return_state=True)
        reference.build(inputs.shape)
        reference.set_weights([w.numpy() for w in layer.weights])
        expected, expected_h, expected_c = reference(inputs)
        self.assertAllClose(outputs, expected, atol=1e-5)
        self.assertAllClose(h, expected_h, atol=1e-5)
        self.assertAllClose(c, expected_c, atol=1e-5)

    def test_inference_uses_expected_zoneout(self):
        zoneout = 0.3
        layer, inputs = self._layer_and_inputs(zoneout)
        outputs, _ = layer(inputs, training=False)
        kernel, recurrent, bias = (w.numpy() for w in layer.weights)
        h = c = np.zeros((3, 4))
        for t in range(inputs.shape[1]):
            h_new, c_new = numpy_lstm_step(inputs[:, t], h, c, kernel, recurrent, bias)
            c = zoneout * c + (1 - zoneout) * c_new
            h = zoneout * h + (1 - zoneout) * h_new
            self.assertAllClose(outputs[:, t], h, atol=1e-5)

    def test_training_keeps_each_unit_or_updates_it(self):
        layer, inputs = self._layer_and_inputs(zoneout=0.5, steps=8)
        outputs = np.asarray(layer(inputs, training=True)[0])
        kernel, recurrent, bias = (w.numpy() for w in layer.weights)
        # With h and c unknown per unit we check h only: each unit is its previous value or
        # lies in (-1, 1) as a fresh LSTM output; and about half of the units are kept.
        kept = np.isclose(outputs[:, 1:], outputs[:, :-1])
        self.assertGreater(kept.mean(), 0.3)
        self.assertLess(kept.mean(), 0.7)
        zeros = np.zeros((3, 4))
        first_h, _ = numpy_lstm_step(inputs[:, 0], zeros, zeros, kernel, recurrent, bias)
        first = outputs[:, 0]
        self.assertTrue(np.all(np.isclose(first, 0.0, atol=1e-6)
                               | np.isclose(first, first_h, atol=1e-5)))

    def test_training_masks_keep_units_at_the_zoneout_rate(self):
        # 2 x 60 x 20 x 50 draws a call: the share kept is the rate within 5 standard
        # deviations, the h and c masks differ, and each call draws new masks.
        for rate in (0.1, 0.5):
            layer = ZoneoutLSTM(50, zoneout=rate, seed=7)
            first = [np.asarray(ops.convert_to_numpy(k)) for k in
                     layer._zoneout_keep(60, 20, training=True)]
            second = np.asarray(ops.convert_to_numpy(layer._zoneout_keep(60, 20, True)[0]))
            both = np.stack(first)
            self.assertEqual(both.shape, (2, 60, 20, 50))
            self.assertTrue(np.all((both == 0) | (both == 1)))
            tolerance = 5 * np.sqrt(rate * (1 - rate) / both.size)
            self.assertAllClose(both.mean(), rate, atol=tolerance)
            self.assertLess(np.mean(first[0] == first[1]), 0.9)
            self.assertLess(np.mean(first[0] == second), 0.9)
        # A rate far below 2^-16 (TensorFlow's resolution) keeps almost nothing.
        tiny = ZoneoutLSTM(50, zoneout=1e-9, seed=7)
        self.assertLess(float(np.mean(ops.convert_to_numpy(
            tiny._zoneout_keep(60, 20, True)[0]))), 1e-3)

    def test_missing_positions_keep_every_unit_in_training_and_inference(self):
        # Two layers of one seed draw the same masks; where step_mask is 0, the weight of the
        # previous state is 1, elsewhere the draw (training) or the zoneout rate (inference).
        step_mask = np.ones((4, 6), bool)
        step_mask[1, :3] = False
        step_mask[3, 5] = False
        missing = ~step_mask.T[:, :, None]  # (T, B, 1)
        plain = ZoneoutLSTM(8, zoneout=0.3, seed=5)._zoneout_keep(6, 4, True)
        masked = ZoneoutLSTM(8, zoneout=0.3, seed=5)._zoneout_keep(6, 4, True, step_mask)
        for drawn, kept in zip(plain, masked, strict=True):
            drawn, kept = ops.convert_to_numpy(drawn), ops.convert_to_numpy(kept)
            self.assertEqual(kept.shape, (6, 4, 8))
            self.assertAllEqual(kept, np.where(missing, 1.0, drawn))
            self.assertGreater(np.mean(drawn == 0), 0.4)  # the draws do vary
        for kept in ZoneoutLSTM(8, zoneout=0.3)._zoneout_keep(6, 4, False, step_mask):
            self.assertAllClose(ops.convert_to_numpy(kept),
                                np.broadcast_to(np.where(missing, 1.0, 0.3), (6, 4, 8)))

    def test_masked_steps_keep_the_state(self):
        layer, inputs = self._layer_and_inputs()
        mask = np.ones((3, 6), bool)
        mask[:, :2] = False  # before the start of the text
        outputs, (h, c) = layer(inputs, step_mask=mask)
        alone, (h_alone, c_alone) = layer(inputs[:, 2:])
        self.assertAllClose(outputs[:, :2], np.zeros((3, 2, 4)))
        self.assertAllClose(outputs[:, 2:], alone, atol=1e-6)
        self.assertAllClose(h, h_alone, atol=1e-6)
        self.assertAllClose(c, c_alone, atol=1e-6)

    def test_state_index_and_carried_state_split_a_sequence(self):
        layer, inputs = self._layer_and_inputs()
        whole, _ = layer(inputs)
        _, state = layer(inputs, state_index=2)
        second, _ = layer(inputs[:, 3:], initial_state=state)
        self.assertAllClose(second, whole[:, 3:], atol=1e-6)

    def test_compiled_matches_eager(self):
        layer, inputs = self._layer_and_inputs(zoneout=0.2)
        eager = layer(inputs)[0]
        compiled = testing.compiled(lambda x: layer(x)[0])(inputs)
        self.assertAllClose(eager, compiled, atol=1e-5)

    def test_compiled_training_step_advances_the_seed_state(self):
        # A stateless call (the seed state in, the advanced state out) compiled by XLA / jax.jit
        # advances the state as an eager one does. On JAX it also draws the same masks (TF's
        # stateless random ops may draw other numbers under XLA than eagerly).
        layer, inputs = self._layer_and_inputs(zoneout=0.5)
        trainable = [v.value for v in layer.trainable_variables]
        state = [v.value for v in layer.non_trainable_variables]

        def train_call(trainable, state, x):
            (outputs, _), new_state = layer.stateless_call(trainable, state, x, training=True)
            return outputs, new_state

        eager, eager_state = train_call(trainable, state, inputs)
        compiled, compiled_state = testing.compiled(train_call)(trainable, state, inputs)
        if keras.backend.backend() == "jax":
            self.assertAllClose(eager, compiled, atol=1e-5)
        kept = np.isclose(np.asarray(compiled)[:, 1:], np.asarray(compiled)[:, :-1])
        self.assertTrue(0.3 < kept.mean() < 0.7)
        self.assertAllEqual(eager_state[0], compiled_state[0])
        self.assertNotAllEqual(eager_state[0], state[0])  # the generator advanced

    def test_dynamic_length_scan_matches_the_unrolled_loop(self):
        # A TF graph traced for any length runs the scan branch.
        if keras.backend.backend() != "tensorflow":
            self.skipTest("dynamic shapes are a TF graph's")
        layer, inputs = self._layer_and_inputs(zoneout=0.3)
        mask = np.ones((3, 6), bool)
        mask[1, :2] = False
        any_length = tf.function(
            lambda x, m: layer(x, step_mask=m, state_index=3),
            input_signature=[tf.TensorSpec((None, None, 5)), tf.TensorSpec((None, None), tf.bool)])
        outputs, (h, c) = any_length(inputs, mask)
        expected, (expected_h, expected_c) = layer(inputs, step_mask=mask, state_index=3)
        self.assertAllClose(outputs, expected, atol=1e-6)
        self.assertAllClose(h, expected_h, atol=1e-6)
        self.assertAllClose(c, expected_c, atol=1e-6)

    def test_dynamic_length_scan_matches_the_unrolled_loop_under_bfloat16(self):
        # Both paths take the 16-bit product and the float32 cell: the same numbers.
        if keras.backend.backend() != "tensorflow":
            self.skipTest("dynamic shapes are a TF graph's")
        inputs = self.rng.normal(size=(3, 8, 5)).astype("float32")
        layer = ZoneoutLSTM(16, zoneout=0.3, seed=3, dtype="mixed_bfloat16")
        layer.build(inputs.shape)
        any_length = tf.function(lambda x: layer(x, state_index=5),
                                 input_signature=[tf.TensorSpec((None, None, 5))])
        # Both traced: in a graph the input projection's bias is fused into its product
        # (`affine`), rounded once where eager rounds the product and then the sum.
        this_length = tf.function(lambda x: layer(x, state_index=5))
        scanned, (h, c) = any_length(inputs)
        unrolled, (expected_h, expected_c) = this_length(inputs)
        for got, want in ((scanned, unrolled), (h, expected_h), (c, expected_c)):
            self.assertEqual(got.dtype, tf.bfloat16)
            self.assertAllClose(tf.cast(got, tf.float32), tf.cast(want, tf.float32), atol=1e-6)

    def test_rejects_bad_zoneout(self):
        with self.assertRaisesRegex(ValueError, "zoneout must be in"):
            ZoneoutLSTM(3, zoneout=1.0)

    def test_a_scan_unrolled_k_steps_gives_the_numbers_of_one_step_an_iteration(self):
        # 7 steps at 3 an iteration leave a remainder of one; zoneout masks drawn (training),
        # some steps masked, the state taken after step 4; outputs, state and the gradients
        # of the inputs and the recurrent kernel. The scan is JAX's path, and TensorFlow's for a
        # length known only at run time.
        inputs = self.rng.normal(size=(3, 7, 5)).astype("float32")
        mask = np.ones((3, 7), bool)
        mask[1, :2] = False
        weights = self.rng.normal(size=(3, 7, 4)).astype("float32")
        results, first_weights = [], None
        for unroll in (1, 3):
            layer = ZoneoutLSTM(4, zoneout=0.3, seed=3, scan_unroll=unroll)
            layer.build(inputs.shape)
            if first_weights is None:
                first_weights = layer.get_weights()
            else:
                layer.set_weights(first_weights)
            results.append(_outputs_and_gradients(layer, inputs, mask, weights))
        for one_step, unrolled in zip(*results, strict=True):
            self.assertAllClose(one_step, unrolled, atol=1e-6)

    def test_rejects_bad_scan_unroll(self):
        for bad in (0, -2, 2.0, True):
            with self.assertRaisesRegex(ValueError, "scan_unroll must be a positive int or None"):
                ZoneoutLSTM(3, scan_unroll=bad)
        restored = ZoneoutLSTM.from_config(ZoneoutLSTM(3, scan_unroll=4).get_config())
        self.assertEqual(restored.scan_unroll, 4)


def _outputs_and_gradients(layer, inputs, mask, weights):
    """A training call's outputs, `(h, c)` after step 4, and the gradients of
    `sum(weights * outputs)` with respect to the inputs and the recurrent kernel, through the
    scan (jax.jit on JAX; a TF graph traced for any length on TensorFlow)."""
    if keras.backend.backend() == "jax":
        import jax

        kernel_index = [v.path for v in layer.trainable_variables].index(
            layer.recurrent_kernel.path)
        trainable = [v.value for v in layer.trainable_variables]
        state = [v.value for v in layer.non_trainable_variables]

        def loss(x, trainable):
            (outputs, (h, c)), _ = layer.stateless_call(trainable, state, x, step_mask=mask,
                                                        state_index=4, training=True)
            return (weights * outputs).sum(), (outputs, h, c)

        (_, (outputs, h, c)), (d_x, d_trainable) = jax.jit(
            jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(inputs, trainable)
        return outputs, h, c, d_x, d_trainable[kernel_index]
    any_length = [tf.TensorSpec((None, None, 5)), tf.TensorSpec((None, None), tf.bool)]

    @tf.function(input_signature=any_length)
    def call(x, m):
        with tf.GradientTape() as tape:
            tape.watch(x)
            outputs, (h, c) = layer(x, step_mask=m, state_index=4, training=True)
            total = tf.reduce_sum(weights * outputs)
        d_x, d_kernel = tape.gradient(total, [x, layer.recurrent_kernel])
        return outputs, h, c, d_x, d_kernel

    return [np.asarray(t) for t in call(inputs, mask)]


def _keep_from_words(words, shape, threshold, missing):
    """Zoneout's weights `(2, T, B, H)` from the generator's 32-bit words, as the native
    kernel's comment states them: word w's low 16 bits are draw 2w, its high 16 bits draw
    2w + 1; kept where the draw is below `threshold` or the position `(T, B)` is missing."""
    words = np.asarray(words, np.uint32)
    draws = np.stack([words & 0xFFFF, words >> 16], axis=-1).reshape(-1)[:np.prod(shape)]
    return ((draws.reshape(shape) < threshold) | missing[None, :, :, None]).astype(np.float32)


@testing.skip_unless_tensorflow("the native kernel of zoneout's weights")
class NativeZoneoutKeepTest(testing.TestCase):

    def setUp(self):
        super().setUp()
        self.library = testing.native_library(self)

    def test_training_weights_are_the_tensorflow_ops_bit_for_bit(self):
        # The same seed inside `native.enabled()` (the kernel) and outside (TensorFlow's ops):
        # equal weights, each call's and the next call's, with and without missing positions.
        step_mask = self.rng.random((5, 7)) > 0.3
        for units, rate, dtype, mask in ((13, 0.1, "float32", None),
                                         (650, 0.05, "bfloat16", step_mask),
                                         (3, 0.5, "float16", step_mask)):
            ops_layer = ZoneoutLSTM(units, zoneout=rate, seed=11, dtype=dtype)
            native_layer = ZoneoutLSTM(units, zoneout=rate, seed=11, dtype=dtype)
            for _ in range(2):
                expected = ops_layer._zoneout_keep(7, 5, True, mask)
                with native.enabled():
                    got = native_layer._zoneout_keep(7, 5, True, mask)
                for e, g in zip(expected, got, strict=True):
                    self.assertEqual(g.dtype, e.dtype)
                    self.assertEqual(g.shape, (7, 5, units))
                    self.assertAllEqual(tf.cast(g, tf.float32), tf.cast(e, tf.float32))

    def test_draws_tensorflows_words_at_any_counter(self):
        # Counters whose low 32 bits, and whose low 64 bits, wrap within one call: the kernel
        # draws 16 calls side by side and must carry as TensorFlow's generator does.
        steps, batch, units = 3, 4, 45  # 1,080 weights: 135 calls, a batch of 16 and a tail
        missing = self.rng.random((steps, batch)) < 0.25
        for low, high in ((2**32 - 7, 5), (2**64 - 70, 2**64 - 1), (123, 456)):
            key = tf.constant([0x1234_5678_9ABC_DEF0], tf.uint64)
            counter = tf.constant([low, high], tf.uint64)
            words = tf.raw_ops.StatelessRandomUniformFullIntV2(
                shape=[steps * batch * units], key=key, counter=counter, alg=1, dtype=tf.uint32)
            keep_h, keep_c = self.library.psmm_zoneout_keep(key, counter, missing, units=units,
                                                            threshold=20000, dtype=tf.float32)
            expected = _keep_from_words(words, (2, steps, batch, units), 20000, missing)
            self.assertAllEqual(np.stack([keep_h, keep_c]), expected)

    def test_refuses_bad_inputs(self):
        key, counter = tf.constant([1], tf.uint64), tf.constant([2, 3], tf.uint64)
        missing = tf.zeros((2, 3), tf.bool)
        with self.assertRaisesRegex((tf.errors.InvalidArgumentError, ValueError),
                                    r"threshold must be in \[1, 65535\], got 65536"):
            self.library.psmm_zoneout_keep(key, counter, missing, units=4, threshold=65536,
                                           dtype=tf.float32)
        with self.assertRaisesRegex((tf.errors.InvalidArgumentError, ValueError),
                                    "counter must hold 2 elements"):
            self.library.psmm_zoneout_keep(key, key, missing, units=4, threshold=5,
                                           dtype=tf.float32)
        with self.assertRaisesRegex((tf.errors.InvalidArgumentError, ValueError),
                                    r"missing must be \(steps, batch\), got \[6\]"):
            self.library.psmm_zoneout_keep(key, counter, tf.zeros((6,), tf.bool), units=4,
                                           threshold=5, dtype=tf.float32)


class LockedDropoutTest(testing.TestCase):

    def test_mask_is_shared_across_time_and_scaled(self):
        inputs = np.ones((4, 7, 50), "float32")
        outputs = np.asarray(LockedDropout(0.5, seed=1)(inputs, training=True))
        self.assertAllEqual(outputs, np.broadcast_to(outputs[:, :1], outputs.shape))
        self.assertEqual(set(np.unique(outputs)), {0.0, 2.0})

    def test_identity_at_inference(self):
        inputs = self.rng.normal(size=(2, 3, 4)).astype("float32")
        self.assertAllEqual(LockedDropout(0.5)(inputs, training=False), inputs)

    def test_rejects_bad_rate(self):
        with self.assertRaisesRegex(ValueError, r"rate must be in \[0, 1\)"):
            LockedDropout(1.5)

    def test_sixteen_bit_inputs_drop_the_units_their_float32_twin_drops(self):
        inputs = self.rng.normal(size=(6, 5, 40)).astype("float32")
        # The float32 layer's mask and scale, from the same seed.
        scale = np.asarray(LockedDropout(0.1, seed=7)(np.ones_like(inputs), training=True))
        for dtype in ("bfloat16", "float16"):
            narrow = LockedDropout(0.1, seed=7, dtype=f"mixed_{dtype}")(inputs, training=True)
            self.assertEqual(keras.backend.standardize_dtype(narrow.dtype), dtype)
            # The (16-bit) input times the float32 scale, rounded once.
            rounded = np.asarray(ops.cast(ops.cast(inputs, dtype), "float32"))
            expected = np.asarray(ops.cast(ops.cast(rounded * scale, dtype), "float32"))
            self.assertAllEqual(np.asarray(ops.cast(narrow, "float32")), expected)

    def test_sixteen_bit_dropout_keeps_the_expectation(self):
        # keras.random.dropout on a bfloat16 input keeps 0.8986 of the units at rate 0.1 and
        # scales by 1.109: the mean of ones would be 0.9969, 30 standard errors from 1 here.
        ones = ops.ones((400, 2500), "bfloat16")
        for rate in (0.1, 0.3):
            outputs = np.asarray(ops.cast(locked_dropout.dropout(ones, rate, seed=3), "float32"))
            standard_error = np.sqrt(rate / (1.0 - rate) / outputs.size)
            self.assertLess(abs(outputs.mean() - 1.0), 4 * standard_error)
            kept = (outputs > 0).mean()
            self.assertLess(abs(kept - (1.0 - rate)),
                            4 * np.sqrt(rate * (1.0 - rate) / outputs.size))


if __name__ == "__main__":
    tf.test.main()
