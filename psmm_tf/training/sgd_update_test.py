"""The clipped SGD update of `sgd_update`: its native kernels against NumPy, and the training
step that uses it against Keras' SGD on the clipped gradients."""

import keras
import numpy as np
import tensorflow as tf

from psmm_tf import native
from psmm_tf.configs import ModelConfig
from psmm_tf.gradients import squared_norm
from psmm_tf.models import build_model
from psmm_tf.training import sgd_update
from psmm_tf.training.steps import TrainStep

B, T, V = 3, 5, 17


def _library(test):
    library = native.library()
    if library is None:
        test.skipTest("the native kernels do not build here")
    return library


class NativeKernelsTest(tf.test.TestCase):
    def test_squared_norm_is_the_float_sum_of_squares_in_each_dtype(self):
        library = _library(self)
        values = np.random.default_rng(0).normal(size=(301, 97)).astype(np.float32) * 3
        for dtype in (tf.float32, tf.bfloat16, tf.float16):
            x = tf.cast(values, dtype)
            exact = np.sum(np.square(tf.cast(x, tf.float64).numpy()))
            # float32 sums (in the order of the CPU's vector width: AVX2 and AVX-512 differ).
            self.assertAllClose(float(library.psmm_squared_norm(x)), exact, rtol=1e-5)
        self.assertEqual(float(library.psmm_squared_norm(tf.zeros([0, 3]))), 0.0)

    def test_scaled_subtract_updates_the_variable_and_spares_a_held_read(self):
        library = _library(self)
        rng = np.random.default_rng(1)
        weights = rng.normal(size=(40000,)).astype(np.float32)  # several blocks of 2^14
        delta = rng.normal(size=(40000,)).astype(np.float32)
        for dtype in (tf.float32, tf.bfloat16, tf.float16):
            variable = tf.Variable(weights)
            held = variable.read_value()  # this read must keep the value it read
            low = tf.cast(delta, dtype)
            library.psmm_resource_scaled_subtract(variable.handle, low, tf.constant(0.25))
            widened = tf.cast(low, tf.float32).numpy()
            expected = weights - np.float32(0.25) * widened
            self.assertAllClose(variable.numpy(), expected, rtol=0, atol=1e-6)
            self.assertAllEqual(held.numpy(), weights)
            del held  # no read left: the update is in place, and the same
            library.psmm_resource_scaled_subtract(variable.handle, low, tf.constant(-0.5))
            self.assertAllClose(variable.numpy(), expected + np.float32(0.5) * widened,
                                rtol=0, atol=1e-6)

    def test_row_update_subtracts_each_row_and_spares_a_held_read(self):
        library = _library(self)
        rng = np.random.default_rng(3)
        weights = rng.normal(size=(9, 4)).astype(np.float32)
        rows = rng.normal(size=(4, 4)).astype(np.float32)
        for index_dtype in (tf.int32, tf.int64):
            indices = tf.constant([7, 2, 7, 0], index_dtype)  # 7 takes two rows, in order
            expected = weights.copy()
            for i, row in zip(indices.numpy(), rows, strict=True):
                expected[i] -= np.float32(0.5) * row
            variable = tf.Variable(weights)
            held = variable.read_value()
            library.psmm_resource_scaled_subtract_rows(variable.handle, indices, rows,
                                                       tf.constant(0.5))
            self.assertAllClose(variable.numpy(), expected, rtol=0, atol=1e-6)
            self.assertAllEqual(held.numpy(), weights)
            del held  # in place now; rows not named are untouched either way
            library.psmm_resource_scaled_subtract_rows(variable.handle, indices[:1], rows[:1],
                                                       tf.constant(1.0))
            expected[7] -= rows[0]
            self.assertAllClose(variable.numpy(), expected, rtol=0, atol=1e-6)

    def test_row_update_refuses_bad_indices_and_shapes_and_leaves_the_variable(self):
        library = _library(self)
        variable = tf.Variable(tf.ones([5, 3]))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r"indices\[1\] = 5"):
            library.psmm_resource_scaled_subtract_rows(variable.handle, tf.constant([0, 5]),
                                                       tf.ones([2, 3]), tf.constant(1.0))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "row shape"):
            library.psmm_resource_scaled_subtract_rows(variable.handle, tf.constant([0, 1]),
                                                       tf.ones([2, 4]), tf.constant(1.0))
        self.assertAllEqual(variable.numpy(), np.ones([5, 3]))

    def test_scaled_subtract_refuses_other_shapes_and_leaves_the_variable(self):
        library = _library(self)
        variable = tf.Variable(tf.ones([3, 4]))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "one shape"):
            library.psmm_resource_scaled_subtract(variable.handle, tf.ones([4, 3]),
                                                  tf.constant(1.0))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, "alpha must be a scalar"):
            library.psmm_resource_scaled_subtract(variable.handle, tf.ones([3, 4]),
                                                  tf.ones([2]))
        self.assertAllEqual(variable.numpy(), np.ones([3, 4]))


class EmbeddingSlicesTest(tf.test.TestCase):
    def _slices(self, dtype):
        values = np.random.default_rng(2).normal(size=(6, 3)).astype(np.float32)
        indices = np.array([4, 1, 4, 0, 1, 4])  # rows 4 and 1 looked up more than once
        dense = np.zeros((7, 3), np.float32)
        for row, value in zip(indices, tf.cast(tf.cast(values, dtype), tf.float32).numpy(),
                              strict=True):
            dense[row] += value
        return tf.IndexedSlices(tf.cast(values, dtype), tf.constant(indices),
                                tf.constant([7, 3])), dense

    def test_deduplicated_rows_are_distinct_sums_with_the_dense_norm(self):
        for dtype in (tf.float32, tf.bfloat16):
            slices, dense = self._slices(dtype)
            rows = sgd_update.deduplicated(slices)
            self.assertEqual(rows.values.dtype, tf.float32)
            self.assertCountEqual(rows.indices.numpy(), [0, 1, 4])
            self.assertAllClose(tf.convert_to_tensor(rows), dense, rtol=0, atol=1e-6)
            self.assertAllClose(squared_norm(rows), np.sum(np.square(dense)), rtol=1e-6)
            self.assertIs(sgd_update.unwidened(rows), rows)
        grad = tf.ones([2, 3])
        self.assertIs(sgd_update.deduplicated(grad), grad)

    def test_apply_updates_only_the_rows_looked_up(self):
        # The native row update (inside `native.enabled()`) and the TensorFlow ops.
        slices, dense = self._slices(tf.float32)
        start = np.arange(21, dtype=np.float32).reshape(7, 3)
        for context in (native.enabled, native.disabled):
            variable = keras.Variable(start)
            optimizer = keras.optimizers.SGD(learning_rate=0.5)
            optimizer.build([variable])
            with context():
                sgd_update.apply(optimizer, [sgd_update.deduplicated(slices)], [variable],
                                 [tf.constant(0.25)])
            self.assertAllClose(variable.numpy(), start - 0.125 * dense, rtol=0, atol=1e-6)
            self.assertAllEqual(variable.numpy()[[2, 3, 5, 6]], start[[2, 3, 5, 6]])
            self.assertEqual(int(optimizer.iterations), 1)

    def test_the_traced_row_update_is_the_native_kernel_not_a_scatter(self):
        # TensorFlow's ResourceScatterSub would make every later read of the table a copy.
        _library(self)
        slices, _ = self._slices(tf.float32)
        variable = keras.Variable(np.zeros((7, 3), np.float32))
        optimizer = keras.optimizers.SGD(learning_rate=0.5)
        optimizer.build([variable])
        update = tf.function(lambda: sgd_update.apply(
            optimizer, [sgd_update.deduplicated(slices)], [variable], [tf.constant(1.0)]))
        with native.enabled():
            graph = update.get_concrete_function().graph
        op_types = {op.type for op in graph.get_operations()}
        self.assertIn("PsmmResourceScaledSubtractRows", op_types)
        self.assertFalse({t for t in op_types if t.startswith("ResourceScatter")})


def _model(kind, policy):
    config = ModelConfig(kind=kind, vocab_size=V, embedding_dim=6, hidden_dim=6, num_layers=2,
                         window_size=4, input_dropout=0.2, hidden_dropout=0.2,
                         output_dropout=0.2, zoneout=0.1, seed=3)
    model = build_model(config, dtype=policy)
    model(tf.zeros([B, T], tf.int32))
    return model


def _batch(seed):
    rng = np.random.default_rng(seed)
    return {"token_ids": tf.constant(rng.integers(0, V, [B, T]), tf.int32),
            "token_mask": tf.ones([B, T], tf.bool),
            "targets": tf.constant(rng.integers(0, V, [B, T]), tf.int32),
            "target_weights": tf.ones([B, T])}


class ClippedSgdStepTest(tf.test.TestCase):
    def _train(self, kind, policy, plain_sgd, clip_norm=0.05, steps=3):
        keras.utils.set_random_seed(0)
        model = _model(kind, policy)
        optimizer = keras.optimizers.SGD(learning_rate=0.7)
        step = TrainStep(model, optimizer, tf.distribute.get_strategy(), B, 0,
                         use_memory=False, clip_norm=clip_norm, pointer_clip_norm=0.01)
        self.assertTrue(step.plain_sgd)
        step.plain_sgd = plain_sgd  # False: Keras' SGD on the clipped gradients
        carry = step.initial_carry()
        norms = []
        for seed in range(steps):
            metrics, *carry = step(_batch(seed), *carry)
            norms.append(float(metrics["grad_norm"]))
        self.assertEqual(int(optimizer.iterations), steps)
        return [v.numpy() for v in model.trainable_variables], norms

    def _assert_same_training(self, kind, policy, *contexts):
        keras_weights, keras_norms = self._train(kind, policy, plain_sgd=False)
        for context in contexts:
            with context():
                weights, norms = self._train(kind, policy, plain_sgd=True)
            self.assertGreater(min(norms), 0.05)  # every step was clipped
            self.assertAllClose(norms, keras_norms, rtol=1e-5)
            for ours, theirs in zip(weights, keras_weights, strict=True):
                self.assertAllClose(ours, theirs, rtol=1e-5, atol=1e-6)

    def test_equals_keras_sgd_on_clipped_gradients(self):
        # The native kernels (inside the step's `native.enabled()`) and TensorFlow ops.
        for kind in ("lstm", "psmm"):
            for policy in ("float32", "mixed_bfloat16"):
                with self.subTest(kind=kind, policy=policy):
                    self._assert_same_training(kind, policy, native.enabled, native.disabled)

    def test_reads_16_bit_gradients_as_they_are(self):
        model = _model("lstm", "mixed_bfloat16")
        step = TrainStep(model, keras.optimizers.SGD(1.0), tf.distribute.get_strategy(), B, 0,
                         use_memory=False)
        state, memory = step.initial_carry()
        graph = step._forward_backward.get_concrete_function(
            _batch(0), state, memory, tf.constant(float(B)), tf.constant(1.0))
        dtypes = {v.path: g.dtype for v, g in
                  zip(model.trainable_variables, graph.structured_outputs[0], strict=True)}
        # Autocast kernels: their bfloat16 gradient; the embedding (not autocast): float32.
        kernels = [path for path in dtypes if path.endswith("/kernel")]
        self.assertNotEmpty(kernels)
        for path in kernels:
            self.assertEqual(dtypes[path], tf.bfloat16, path)
        embedding = [path for path in dtypes if path.endswith("/embeddings")]
        self.assertEqual([dtypes[path] for path in embedding], [tf.float32])
        # The embedding's rows as looked up, not a dense (V, E) gradient.
        slices = [g for v, g in zip(model.trainable_variables, graph.structured_outputs[0],
                                    strict=True) if v.path.endswith("/embeddings")]
        self.assertIsInstance(slices[0], tf.IndexedSlices)

    def test_supports_only_plain_sgd_on_unconstrained_float32_variables(self):
        variables = _model("lstm", "float32").trainable_variables
        self.assertTrue(sgd_update.supports(keras.optimizers.SGD(0.1), variables))
        for optimizer in (keras.optimizers.SGD(0.1, momentum=0.9),
                          keras.optimizers.SGD(0.1, weight_decay=1e-4),
                          keras.optimizers.SGD(0.1, clipnorm=1.0),
                          keras.optimizers.Adam(0.1),
                          keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))):
            self.assertFalse(sgd_update.supports(optimizer, variables), optimizer)
        constrained = keras.Variable(np.ones(3, np.float32))
        constrained.constraint = keras.constraints.NonNeg()
        self.assertFalse(sgd_update.supports(keras.optimizers.SGD(0.1), [constrained]))


if __name__ == "__main__":
    tf.test.main()
