"""The LSTM recurrence with zoneout on TensorFlow, with a hand-written backward pass.

TensorFlow's automatic gradient of an unrolled LSTM computes the recurrent kernel's gradient
`h_{t-1}^T dz_t` as one small `(H, B) x (B, 4H)` product per step and adds the T results up,
and, under a mixed policy, casts the kernel and each of those T gradients once per step. The
backward pass here keeps what must be sequential (each step's `dz_t U^T`) and takes the
kernel's gradient as one product over all steps, `H_prev^T dZ` (what cuDNN's LSTM does).
In the training steps, on a CPU with AVX-512 (float32) or AVX512-BF16 (bfloat16), each step's
`h_{t-1} U` and `dz_t U^T` take a native product on `U` and `U^T` packed once per call
(`psmm_tf/native/recurrent_product.cc`; oneDNN's bfloat16 product packs `U` again at
every step; docs/results.md, "The recurrent products on a packed kernel"). Elsewhere they are
oneDNN's, float32's `dz_t U^T` on a transposed copy of `U` made once per call: oneDNN's float32
product with a transposed right operand ran slower at a small batch than the same product on a
stored `U^T` (in bfloat16 the transposed operand is the faster one; docs/results.md, "The
machine's limit").
`benchmarks/machine_limit.py` measures it (docs/results.md, "The machine's limit"). The
numbers are those of the automatic gradient up to float rounding in float32 and float64; under a
16-bit policy the products are 16-bit and the cell float32, checked against float64
(`lstm_recurrence_tf_test.py`). In the training steps the cell's elementwise work, forward and
backward, is one native CPU kernel a step (`psmm_tf.native`); elsewhere, and where that
kernel cannot be built, it runs as TensorFlow ops, the same equations.
"""

import tensorflow as tf

from psmm_tf import native
from psmm_tf.layers.dense import weight_gradient
from psmm_tf.layers.lstm_cell import lstm_cell, zoneout


def zoneout_recurrence(projected, keep_h, keep_c, h0, c0, recurrent_kernel, state_index,
                       fused_cell=None):
    """Runs the recurrence over time-major inputs.

    Per step (gates i, f, g, o in Keras' order):
    `z = x_t W + b + h_{t-1} U`, `c' = sig(f) c_{t-1} + sig(i) tanh(g)`, `h' = sig(o) tanh(c')`,
    then zoneout `c_t = c' + k^c_t (c_{t-1} - c')`, `h_t = h' + k^h_t (h_{t-1} - h')`.

    Args:
        projected: `(T, B, 4H)`, `x_t W + b` of every step, in the compute dtype.
        keep_h, keep_c: `(T, B, H)`, the zoneout weights of the previous state (no gradient).
        h0, c0: `(B, H)`, the state before the first step.
        recurrent_kernel: `(H, 4H)` `U`, in the compute dtype.
        state_index: static int in `[0, T)`: the step whose state is returned.
        fused_cell: optional bool. True runs the cell's elementwise work, forward and
            backward, as one native CPU kernel a step (`psmm_tf.native`) where it can be
            built and run (`psmm_tf.native.library_for`); the recurrence's products take the
            packed kernel on the CPUs it is written for. False, or where they cannot, runs
            TensorFlow ops; both compute the same equations. None (the default): True inside
            `psmm_tf.native.enabled()` (the training steps), else False, so exported graphs
            hold only TensorFlow's own ops.

    Returns:
        `(all_h, h, c)`: `(T, B, H)` the hidden state after every step, and the state after
        step `state_index`.
    """
    steps = projected.shape[0]
    # Under a 16-bit policy the products stay 16-bit and the cell's elementwise work runs in
    # float32 (`wide`): Eigen's bfloat16 elementwise kernels are slower than float32's, and the
    # cell state keeps float32 precision within the window. A no-op cast otherwise.
    low = projected.dtype
    wide = tf.float32 if low in (tf.bfloat16, tf.float16) else low

    library = native.library_for("zoneout_cell", use=fused_cell)
    packed = native.library_for("recurrent_product", low, use=fused_cell)

    @tf.custom_gradient
    def recurrence(projected, h0, c0, kernel):
        # Per-step tensors are taken with one `unstack` each, not T slices. The native kernel
        # reads the 16-bit products and writes the 16-bit h the next product reads; the ops
        # path casts.
        projected_steps = tf.unstack(projected if library is not None
                                     else tf.cast(projected, wide))
        keep_h_wide, keep_c_wide = tf.cast(keep_h, wide), tf.cast(keep_c, wide)
        keep_h_steps, keep_c_steps = tf.unstack(keep_h_wide), tf.unstack(keep_c_wide)
        h, c = tf.cast(h0, wide), tf.cast(c0, wide)
        h_low = h0
        saved, all_h, all_c = [], [], []
        times_kernel = (_times_packed(packed, kernel, transpose=False) if packed is not None
                        else lambda h: tf.matmul(h, kernel))
        for t in range(steps):
            product = times_kernel(h_low)
            if library is not None:
                # The activations (i, f, g, o, tanh(c')) as one (B, 5H) tensor.
                c_prev = c
                h, c, activations, h_next_low = library.psmm_zoneout_cell(
                    projected_steps[t], product, h, c, keep_h_steps[t], keep_c_steps[t])
                saved.append((h_low, c_prev, activations))
                h_low = h_next_low
            else:
                activations, c_new, h_new = lstm_cell(
                    projected_steps[t] + tf.cast(product, wide), c)
                saved.append((h_low, c) + activations)
                c = zoneout(c_new, c, keep_c_steps[t])
                h = zoneout(h_new, h, keep_h_steps[t])
                h_low = tf.cast(h, low)
            all_h.append(h_low)
            all_c.append(c)
        outputs = (tf.stack(all_h), all_h[state_index], tf.cast(all_c[state_index], low))

        def backward(d_all_h, d_h_out, d_c_out):
            backprop_through_kernel = (  # only when differentiated
                _times_packed(packed, kernel, transpose=True) if packed is not None
                else _times_transposed(kernel))
            d_all_h, d_h_out, d_c_out = (
                tf.zeros_like(like, dtype=wide) if d is None else tf.cast(d, wide)
                for d, like in ((d_all_h, outputs[0]), (d_h_out, h0), (d_c_out, c0)))
            cell_backward = (_native_cell_backward(library, saved, keep_h_steps, keep_c_steps)
                             if library is not None else
                             _ops_cell_backward(saved, keep_h_wide, keep_c_wide, low))
            d_all_h = tf.unstack(d_all_h)
            # dh reaching h_t, in three parts: from the outputs, carried by zoneout
            # (k^h dh_{t+1}), and through the kernel (dz_{t+1} U^T, in the products' dtype).
            carried = dc = tf.zeros_like(c0, dtype=wide)
            through_kernel = tf.zeros_like(c0, dtype=low)
            dz_all = [None] * steps
            for t in reversed(range(steps)):
                d_out = d_all_h[t]
                if t == state_index:
                    d_out, dc = d_out + d_h_out, dc + d_c_out
                # dz in the products' dtype.
                dz_all[t], carried, dc = cell_backward(t, d_out, carried, through_kernel, dc)
                through_kernel = backprop_through_kernel(dz_all[t])
            dh = carried + tf.cast(through_kernel, wide)
            d_projected = tf.stack(dz_all)
            # dU = sum_t h_{t-1}^T dz_t, one product over all steps (in the faster form for
            # its dtype: weight_gradient).
            h_prev_all = tf.stack([s[0] for s in saved])
            units = kernel.shape[0]
            d_kernel = weight_gradient(tf.reshape(h_prev_all, [-1, units]),
                                       tf.reshape(d_projected, [-1, 4 * units]))
            return d_projected, tf.cast(dh, low), tf.cast(dc, low), d_kernel

        return outputs, backward

    return recurrence(projected, h0, c0, recurrent_kernel)


def _native_cell_backward(library, saved, keep_h_steps, keep_c_steps):
    """`(t, dh_out, dh_carried, dh_through_kernel, dc) -> (dz_t, dh_{t-1}, dc_{t-1})` (dh_{t-1}
    less its part through `U`), one native kernel a step; dh is the sum of its three parts.
    `dh_through_kernel` and `dz_t` are in the products' dtype, the rest in the cell's."""

    def step(t, dh_out, dh_carried, dh_through_kernel, dc):
        _, c_prev, activations = saved[t]
        return library.psmm_zoneout_cell_grad(dh_out, dh_carried, dh_through_kernel, dc,
                                             activations, c_prev, keep_h_steps[t],
                                             keep_c_steps[t])

    return step


def _ops_cell_backward(saved, keep_h, keep_c, low):
    """What `_native_cell_backward` computes, as TensorFlow ops (`low`: the products' dtype).
    The elementwise factors that do not depend on the step after are computed for all steps
    at once, so the loop holds a few ops a step instead of some forty."""
    c_prev, i, f, g, o, tanh_c = (tf.stack(x) for x in list(zip(*saved))[1:])
    # Zoneout: h_t = (1 - k) h' + k h_{t-1} (the same for c). Per step:
    # dh' = (1 - k^h) dh, dc' = (1 - k^c) dc + dh' o (1 - tanh(c')^2), and
    # dz = [dc' g i (1 - i), dc' c_{t-1} f (1 - f), dc' i (1 - g^2), dh' tanh(c') o (1 - o)].
    gate_factors = tf.unstack(tf.concat(
        [g * i * (1 - i), c_prev * f * (1 - f), i * (1 - g * g), tanh_c * o * (1 - o)],
        axis=-1))
    cell_from_h = tf.unstack(o * (1 - tanh_c * tanh_c))
    update_h, update_c = tf.unstack(1 - keep_h), tf.unstack(1 - keep_c)
    keep_h, keep_c, forget = tf.unstack(keep_h), tf.unstack(keep_c), tf.unstack(f)

    def step(t, dh_out, dh_carried, dh_through_kernel, dc):
        dh = dh_out + dh_carried + tf.cast(dh_through_kernel, dh_out.dtype)
        dh_new = update_h[t] * dh
        dc_new = update_c[t] * dc + dh_new * cell_from_h[t]
        dz = tf.concat([dc_new, dc_new, dc_new, dh_new], axis=-1) * gate_factors[t]
        return tf.cast(dz, low), keep_h[t] * dh, keep_c[t] * dc + dc_new * forget[t]

    return step


def _times_packed(library, kernel, transpose):
    """`x -> x U` (or `x U^T` with `transpose`) for the `(H, 4H)` kernel `U`, packed once for
    all the steps of the call, where oneDNN's bfloat16 product packs it again every step
    (docs/results.md, "The recurrent products on a packed kernel")."""
    packed = library.psmm_pack_kernel(kernel, transpose=transpose)
    columns = kernel.shape[0] if transpose else kernel.shape[1]
    return lambda x: library.psmm_packed_product(x, packed, columns=columns)


def _times_transposed(kernel):
    """`dz -> dz U^T` for the `(H, 4H)` kernel `U`, in the faster form for its dtype."""
    if kernel.dtype != tf.float32:
        return lambda dz: tf.matmul(dz, kernel, transpose_b=True)
    units = kernel.shape[0]
    # U^T as a 3-D transpose of U's (H, 4, H) view: grappler folds a 2-D transpose that feeds
    # a product back into `transpose_b`, the slow form.
    kernel_t = tf.reshape(tf.transpose(tf.reshape(kernel, [units, 4, units]), [1, 2, 0]),
                          [4 * units, units])
    return lambda dz: tf.matmul(dz, kernel_t)
