"""The hand-written backward pass of the TensorFlow recurrence against TF's automatic gradient of
the same recurrence written plainly, step by step."""

import dataclasses
import functools
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from psmm_tf import native, testing
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



def _cell_paths(test):
    """`zoneout_recurrence` with the native cell (where a compiler is present: it must build)
    and with the cell as TensorFlow ops."""
    paths = [("ops", functools.partial(zoneout_recurrence, fused_cell=False))]
    if testing.has_cxx_compiler():
        test.assertIsNotNone(native.library(), "the native cell failed to build")
        paths.append(("native", functools.partial(zoneout_recurrence, fused_cell=True)))
    return paths


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

        def run(function):
            with tf.GradientTape() as tape:
                tape.watch([projected, h0, c0, kernel])
                outputs = function(projected, keep_h, keep_c, h0, c0, kernel, state_index)
                loss = sum(tf.reduce_sum(w * o) for w, o in zip(weights, outputs, strict=True))
            grads = tape.gradient(loss, [projected, h0, c0, kernel])
            return [o.numpy() for o in outputs] + [g.numpy() for g in grads]

        want = run(_plain_recurrence)
        for name, function in _cell_paths(self):
            with self.subTest(cell=name):
                for got, expected in zip(run(function), want, strict=True):
                    self.assertAllClose(got, expected, atol=atol, rtol=atol)

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
        for name, recurrence in _cell_paths(self):
            with self.subTest(cell=name):
                self._check_16_bit(recurrence, dtype, tolerance, against_16_bit_cell, projected,
                                   kernel, h0, c0, keep, weights)

    def _check_16_bit(self, recurrence, dtype, tolerance, against_16_bit_cell, projected,
                      kernel, h0, c0, keep, weights):
        results = []
        for function, cast in ((recurrence, dtype), (_plain_recurrence, dtype),
                               (recurrence, tf.float64)):
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

    def test_native_cell_refuses_inputs_of_other_shapes(self):
        if not testing.has_cxx_compiler():
            self.skipTest("no C++ compiler: the native cell is not built")
        library = native.library()
        state = tf.zeros((B, H))
        gates = tf.zeros((B, 4 * H))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r"input 4 must be \(3, 4\)"):
            library.psmm_zoneout_cell(gates, gates, state, state, tf.zeros((B, H + 1)), state)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r"input 1 must be"):
            library.psmm_zoneout_cell(gates, tf.zeros((B, 4 * H + 4)), state, state, state,
                                      state)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r"input 0 must be"):
            library.psmm_zoneout_cell(tf.zeros((B, 4 * H + 1)), gates, state, state, state,
                                      state)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r"input 7 must be"):
            library.psmm_zoneout_cell_grad(state, state, state, state, tf.zeros((B, 5 * H)),
                                           state, state, tf.zeros((B + 1, H)))

    def test_native_cell_falls_back_to_ops_when_off_or_unbuildable(self):
        # mode "off" turns it off; a compiler that fails leaves no library in the cache and
        # the recurrence runs as TensorFlow ops ("auto").
        cache = tempfile.mkdtemp()
        settings = ({"mode": "off"}, {"compiler": "/nonexistent/c++", "cache_dir": cache},
                    {"compiler": "false", "cache_dir": cache})
        try:
            for setting in settings:
                old = native.configure(**setting)
                try:
                    with self.subTest(**setting):
                        self.assertIsNone(native.library())
                        self.assertIsNone(native.library_for("zoneout_cell", use=True))
                    keep = tf.zeros((T, B, H))
                    outputs = zoneout_recurrence(tf.ones((T, B, 4 * H)), keep, keep,
                                                 tf.zeros((B, H)), tf.zeros((B, H)),
                                                 tf.ones((H, 4 * H)) * 0.1, T - 1)
                    self.assertAllClose(outputs[0], _plain_recurrence(
                        tf.ones((T, B, 4 * H)), keep, keep, tf.zeros((B, H)),
                        tf.zeros((B, H)), tf.ones((H, 4 * H)) * 0.1, T - 1)[0], atol=1e-6)
                finally:
                    native.configure(**dataclasses.asdict(old))
            # Only the build lock: no library, no temporary folder.
            self.assertEqual([p.name for p in os.scandir(cache)],
                             ["psmm_tf_kernels-build.lock"])
        finally:
            shutil.rmtree(cache)

    def test_native_cell_only_in_graphs_traced_inside_enabled(self):
        # Outside `native.enabled()` (exports, Keras' fit) a traced layer holds TensorFlow's
        # own ops only; inside (the training step) the native kernels, where they build; and
        # never in an XLA-compiled function, which has no kernel for them.
        from psmm_tf.layers import ZoneoutLSTM

        layer = ZoneoutLSTM(H, zoneout=0.3, seed=1)
        x = tf.ones((B, T, 5))

        def native_ops(jit_compile=False):
            def loss():
                with tf.GradientTape() as tape:
                    out = tf.reduce_sum(layer(x, training=True)[0])
                return tape.gradient(out, layer.trainable_variables)

            graph = tf.function(loss, jit_compile=jit_compile).get_concrete_function().graph
            functions = [graph] + [f.graph for f in graph._functions.values()
                                   if hasattr(f, "graph")]
            return sorted({op.type for g in functions for op in g.get_operations()
                           if op.type.startswith("Psmm")})

        self.assertEqual(native_ops(), [])
        with native.enabled(jit_compile=True):  # the step says it is XLA-compiled
            self.assertEqual(native_ops(jit_compile=True), [])
        with native.enabled():
            if testing.has_cxx_compiler():
                # The products on a packed kernel where the CPU has AVX-512 (PackedProductTest).
                packed = (["PsmmPackKernel", "PsmmPackedProduct"]
                          if "avx512f" in native.cpu_flags() else [])
                self.assertEqual(native_ops(), sorted(
                    ["PsmmZoneoutCell", "PsmmZoneoutCellGrad", "PsmmZoneoutKeep"] + packed))


def _draw(rng, dtype, *shape):
    return tf.cast(tf.constant(rng.normal(size=shape)), dtype)


def _numpy_packed(b, group_rows):
    """The packed layout of `recurrent_product.cc`, from its comment:
    `packed[j, p, c, e] = B[g p + e, 32 j + c]`, zero past B's rows or columns."""
    rows, columns = b.shape
    blocks, groups = -(-columns // 32), -(-rows // group_rows)
    padded = np.zeros((group_rows * groups, 32 * blocks), b.dtype)
    padded[:rows, :columns] = b
    return padded.reshape(groups, group_rows, blocks, 32).transpose(2, 0, 3, 1).reshape(
        blocks, groups, 32 * group_rows)


@testing.skip_unless_tensorflow("the native packed products")
class PackedProductTest(testing.TestCase, parameterized.TestCase):

    def setUp(self):
        super().setUp()
        self.library = testing.native_library(self)

    @parameterized.named_parameters(("bfloat16", tf.bfloat16, 2), ("float32", tf.float32, 1))
    def test_packs_the_kernel_or_its_transpose_as_documented(self, dtype, group_rows):
        rng = np.random.default_rng(0)
        for rows, columns in ((7, 5), (64, 70), (33, 32), (1, 1)):
            b = _draw(rng, dtype, rows, columns)
            expected = _numpy_packed(b.numpy(), group_rows)
            self.assertAllEqual(self.library.psmm_pack_kernel(b), expected)
            self.assertAllEqual(
                self.library.psmm_pack_kernel(tf.transpose(b), transpose=True), expected)

    # Rows past a 12-row tile and not a multiple of it, an odd depth (bfloat16: its last
    # element paired with zero), columns past a 32-column block: a B against float64 sums of
    # the same numbers, within the output's rounding (2^-8 of the value in bfloat16, 2^-23 in
    # float32) and the float32 sums' error.
    @parameterized.named_parameters(("bfloat16", tf.bfloat16, 2.0**-8),
                                    ("float32", tf.float32, 2.0**-23))
    def test_products_equal_float64_within_rounding(self, dtype, rounding):
        rng = np.random.default_rng(1)
        for rows, depth, columns in ((20, 650, 2600), (25, 33, 70), (1, 1, 1), (12, 64, 31),
                                     (13, 2600, 650)):
            a, b = _draw(rng, dtype, rows, depth), _draw(rng, dtype, depth, columns)
            got = self.library.psmm_packed_product(a, self.library.psmm_pack_kernel(b),
                                                   columns=columns)
            self.assertEqual(got.dtype, dtype)
            a64, b64 = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
            want = a64 @ b64
            bound = rounding * np.abs(want) + 2.0**-23 * depth * (np.abs(a64) @ np.abs(b64))
            self.assertTrue(np.all(np.abs(got.numpy().astype(np.float64) - want) <= bound),
                            (rows, depth, columns))

    @parameterized.named_parameters(("bfloat16", "mixed_bfloat16", "avx512_bf16"),
                                    ("float32", "float32", "avx512f"))
    def test_the_recurrence_takes_it_in_training_steps_on_a_cpu_with_the_instructions(
            self, policy, flag):
        from psmm_tf.layers import ZoneoutLSTM

        layer = ZoneoutLSTM(H, zoneout=0.3, seed=1, dtype=policy)
        x = tf.ones((B, T, 5))

        def op_types():
            def loss():
                with tf.GradientTape() as tape:
                    out = tf.reduce_sum(tf.cast(layer(x, training=True)[0], tf.float32))
                return tape.gradient(out, layer.trainable_variables)

            graph = tf.function(loss).get_concrete_function().graph
            functions = [graph] + [f.graph for f in graph._functions.values()
                                   if hasattr(f, "graph")]
            return {op.type for g in functions for op in g.get_operations()}

        with native.enabled():
            types = op_types()
        packed = {"PsmmPackKernel", "PsmmPackedProduct"}
        if flag in native.cpu_flags():
            self.assertLessEqual(packed, types)
        else:
            self.assertFalse(packed & types)
        self.assertFalse(packed & op_types())  # outside the training steps: TensorFlow's ops

    def test_refuses_a_packed_kernel_of_other_shapes(self):
        a = tf.zeros((3, 8), tf.bfloat16)
        packed = self.library.psmm_pack_kernel(tf.zeros((8, 40), tf.bfloat16))
        with self.assertRaisesRegex((tf.errors.InvalidArgumentError, ValueError),
                                    r"packed must be \[1,4,64\] for a of \[3,8\] and 20 "
                                    r"columns, got \[2,4,64\]"):
            self.library.psmm_packed_product(a, packed, columns=20)
        with self.assertRaisesRegex((tf.errors.InvalidArgumentError, ValueError),
                                    r"packed must be \[2,3,64\]"):
            self.library.psmm_packed_product(tf.zeros((3, 6), tf.bfloat16), packed, columns=40)
