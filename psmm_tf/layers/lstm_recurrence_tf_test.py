"""The hand-written backward pass of the TensorFlow recurrence against TF's automatic gradient of
the same recurrence written plainly, step by step."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from psmm_tf import testing
from psmm_tf.layers.lstm_recurrence_tf import zoneout_recurrence

T, B, H = 7, 3, 4


def _plain_recurrence(projected, keep_h, keep_c, h, c, kernel, state_index):
    """The recurrence of `zoneout_recurrence`'s docstring, for TF's own gradient."""
    all_h, all_c = [], []
    for t in range(T):
        z = projected[t] + tf.matmul(h, kernel)
        i, f, g, o = tf.split(z, 4, axis=-1)
        c_new = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h_new = tf.sigmoid(o) * tf.tanh(c_new)
        c = keep_c[t] * c + (1 - keep_c[t]) * c_new
        h = keep_h[t] * h + (1 - keep_h[t]) * h_new
        all_h.append(h)
        all_c.append(c)
    return tf.stack(all_h), all_h[state_index], all_c[state_index]


@testing.skip_unless_tensorflow("the TensorFlow recurrence and its backward pass")
class ZoneoutRecurrenceTest(testing.TestCase, parameterized.TestCase):

    # float64 takes the transposed-operand product, float32 the stored U^T (_times_transposed).
    @parameterized.named_parameters(
        ("training_masks_index_inside", "binary", 4, tf.float64, 1e-12),
        ("inference_weights_last_index", "constant", T - 1, tf.float64, 1e-12),
        ("float32_training_masks", "binary", 4, tf.float32, 2e-5),
        ("float32_inference_weights", "constant", T - 1, tf.float32, 2e-5))
    def test_outputs_and_gradients_equal_automatic_differentiation(self, keep, state_index,
                                                                   dtype, atol):
        rng = np.random.default_rng(7)
        projected = tf.constant(rng.normal(size=(T, B, 4 * H)), dtype)
        kernel = tf.constant(rng.normal(size=(H, 4 * H)) * 0.5, dtype)
        h0, c0 = (tf.constant(rng.normal(size=(B, H)), dtype) for _ in range(2))
        if keep == "binary":  # training: each unit kept (1) or updated (0); one masked step
            keep_h, keep_c = (rng.random((T, B, H)) < 0.3 for _ in range(2))
            keep_h[2, 1], keep_c[2, 1] = True, True
        else:  # inference: the expectation
            keep_h = keep_c = np.full((T, B, H), 0.3)
        keep_h, keep_c = (tf.constant(k, dtype) for k in (keep_h, keep_c))
        # Random weights on every output, so each enters the backward pass.
        weights = [tf.constant(rng.normal(size=shape), dtype)
                   for shape in ((T, B, H), (B, H), (B, H))]
        results = []
        for function in (zoneout_recurrence, _plain_recurrence):
            with tf.GradientTape() as tape:
                tape.watch([projected, h0, c0, kernel])
                outputs = function(projected, keep_h, keep_c, h0, c0, kernel, state_index)
                loss = sum(tf.reduce_sum(w * o) for w, o in zip(weights, outputs, strict=True))
            grads = tape.gradient(loss, [projected, h0, c0, kernel])
            results.append([o.numpy() for o in outputs] + [g.numpy() for g in grads])
        for got, want in zip(*results, strict=True):
            self.assertAllClose(got, want, atol=atol, rtol=atol)

    # 16-bit policies: the products in 16 bits, the cell in float32. Against float64 on the same
    # 16-bit inputs: within `tolerance` (a wrong gradient term is off by far more), and, in
    # bfloat16, at most 0.6 of the error of the same recurrence with its cell in bfloat16
    # (TF's automatic gradient of `_plain_recurrence` run in bfloat16; measured: 0.33).
    @parameterized.named_parameters(("bfloat16", tf.bfloat16, 1e-2, 0.6),
                                    ("float16", tf.float16, 2e-3, None))
    def test_16_bit_policies_keep_their_dtype_and_a_float32_cell(self, dtype, tolerance,
                                                                  against_16_bit_cell):
        rng = np.random.default_rng(7)

        def draw(*shape, scale=1.0):
            return tf.cast(tf.constant(rng.normal(size=shape) * scale), dtype)

        projected, kernel = draw(T, B, 4 * H), draw(H, 4 * H, scale=0.5)
        h0, c0 = draw(B, H), draw(B, H)
        keep = tf.cast(tf.constant(rng.random((T, B, H)) < 0.3), dtype)
        weights = [draw(T, B, H), draw(B, H), draw(B, H)]
        results = []
        for function, cast in ((zoneout_recurrence, dtype), (_plain_recurrence, dtype),
                               (zoneout_recurrence, tf.float64)):
            inputs = [tf.cast(x, cast) for x in (projected, h0, c0, kernel)]
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                outputs = function(inputs[0], tf.cast(keep, cast), tf.cast(keep, cast),
                                   *inputs[1:], 4)
                loss = sum(tf.reduce_sum(tf.cast(w, cast) * o)
                           for w, o in zip(weights, outputs, strict=True))
            values = list(outputs) + tape.gradient(loss, inputs)
            self.assertEqual({v.dtype for v in values}, {cast})  # state and gradients kept
            results.append([tf.cast(v, tf.float64).numpy() for v in values])
        got, cell_16_bit, want = results
        errors = [np.abs(g - w).max() / np.abs(w).max() for g, w in zip(got, want, strict=True)]
        self.assertLess(max(errors), tolerance)
        if against_16_bit_cell is not None:
            plain_errors = [np.abs(g - w).max() / np.abs(w).max()
                            for g, w in zip(cell_16_bit, want, strict=True)]
            self.assertLess(sum(errors), against_16_bit_cell * sum(plain_errors))

    def test_unused_state_outputs_have_no_gradient_to_give(self):
        # The layer's loss reads only `all_h` (TF passes None for the state outputs).
        rng = np.random.default_rng(1)
        projected = tf.constant(rng.normal(size=(T, B, 4 * H)), tf.float32)
        kernel = tf.Variable(rng.normal(size=(H, 4 * H)).astype("float32"))
        zeros = tf.zeros((B, H))
        keep = tf.zeros((T, B, H))
        with tf.GradientTape(persistent=True) as tape:
            fused = tf.reduce_sum(zoneout_recurrence(projected, keep, keep, zeros, zeros,
                                                     kernel, T - 1)[0])
            plain = tf.reduce_sum(_plain_recurrence(projected, keep, keep, zeros, zeros, kernel,
                                                    T - 1)[0])
        self.assertAllClose(tape.gradient(fused, kernel), tape.gradient(plain, kernel),
                            atol=1e-5)
