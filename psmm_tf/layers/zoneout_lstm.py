"""An LSTM layer with zoneout on its recurrent state (Krueger et al. 2016)."""

import keras
from keras import ops

from psmm_tf import native
from psmm_tf.layers.dense import affine
from psmm_tf.layers.lstm_cell import lstm_cell, zoneout

# Steps per scan iteration on an accelerator. A scan of one step an iteration launches the
# step's few small kernels 35 times a layer and direction; unrolled, XLA fuses across steps.
# 5 was measured on an H100 (docs/results.md); a 35-step window is then 7 iterations.
ACCELERATOR_SCAN_UNROLL = 5


def default_scan_unroll():
    """`ACCELERATOR_SCAN_UNROLL` where Keras runs on JAX on a GPU or TPU, else 1 (on CPU no
    gain was measured, and TensorFlow takes its unrolled loop for a static length)."""
    if keras.backend.backend() != "jax":
        return 1
    import jax

    return 1 if jax.default_backend() == "cpu" else ACCELERATOR_SCAN_UNROLL


@keras.saving.register_keras_serializable(package="psmm_tf")
class ZoneoutLSTM(keras.layers.Layer):
    """A single LSTM layer over a sequence, with zoneout and an explicit, carried state.

    Zoneout keeps each unit of the cell and hidden state at its previous value with probability
    `zoneout` during training, `c_t = d * c_{t-1} + (1 - d) * c'_t` with `d ~ Bernoulli(zoneout)`
    per unit and step (the same for `h`), and uses the expectation
    `zoneout * c_{t-1} + (1 - zoneout) * c'_t` at inference, as Krueger et al. do.

    The input projection `x_t W` of every step is one matrix product before the recurrence; the
    loop only does `h_{t-1} U`. The layer uses no cuDNN kernel, so it compiles under XLA on every
    device. Gate order is Keras' (input, forget, cell, output); the forget bias starts at 1.

    Args:
        units: int. Size of the hidden and cell state.
        zoneout: float in [0, 1). Probability of keeping each state unit's previous value
            (training masks on TensorFlow: to the nearest multiple of 2^-16, at least
            2^-16).
        seed: optional int. Seed of the zoneout masks.
        kernel_initializer, recurrent_initializer: initializers of `W` and `U`.
        unit_forget_bias: bool. Start the forget gate's bias at 1 (Jozefowicz et al. 2015, as
            Keras' LSTM); False starts every bias at 0 (Zaremba et al. 2014).
        scan_unroll: optional positive int. Steps of the recurrence per iteration of the scan
            that runs it on JAX (and on TensorFlow for a length known only at run time). None:
            `ACCELERATOR_SCAN_UNROLL` steps where JAX runs on a GPU or TPU, 1 elsewhere (the
            same numbers; docs/results.md). Only speed and compile time depend on it.

    Call arguments:
        inputs: float `(batch_size, T, input_dim)`.
        initial_state: optional pair `(h, c)`, each `(batch_size, units)`; zeros when None.
        step_mask: optional bool `(batch_size, T)`. Where False the state is carried unchanged (the
            position does not exist: before the start or after the end of a text).
        training: bool. Zoneout masks are sampled only when True.
        state_index: optional static int `j`. The returned state is the one after step `j`
            (default: the last step). Used to carry the state of overlapping windows.

    Returns:
        `(outputs, (h, c))`: `outputs` `(batch_size, T, units)` is the hidden state after every
        step; `(h, c)` the state after step `state_index`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.layers import ZoneoutLSTM

    lstm = ZoneoutLSTM(64, zoneout=0.1, seed=1)
    x = np.random.default_rng(0).normal(size=(4, 35, 32)).astype("float32")
    hidden, state = lstm(x, training=True)           # (4, 35, 64); state (h, c)
    more, state = lstm(x, initial_state=state)       # the next piece of the same sequences
    ```

    References:
        - [Krueger et al., 2016](https://arxiv.org/abs/1606.01305)
    """

    def __init__(
        self,
        units,
        zoneout=0.0,
        seed=None,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        unit_forget_bias=True,
        scan_unroll=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not 0.0 <= zoneout < 1.0:
            raise ValueError(f"zoneout must be in [0, 1), got {zoneout!r}.")
        self.units = units
        self.zoneout = float(zoneout)
        self.seed = seed
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)
        self.unit_forget_bias = bool(unit_forget_bias)
        if scan_unroll is not None and (isinstance(scan_unroll, bool)
                                        or not isinstance(scan_unroll, int) or scan_unroll < 1):
            raise ValueError(
                f"scan_unroll must be a positive int or None, got {scan_unroll!r}.")
        self.scan_unroll = scan_unroll
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, input_shape):
        units = self.units
        self.kernel = self.add_weight(
            name="kernel", shape=(input_shape[-1], 4 * units), initializer=self.kernel_initializer
        )
        recurrent_initializer = self.recurrent_initializer

        def recurrent_initial_value(shape, dtype=None):
            # Drawn in float32 and cast: Keras' orthogonal initializer (a QR decomposition)
            # has no 16-bit kernel on TensorFlow or JAX, so a bfloat16 model could not build.
            return ops.cast(recurrent_initializer(shape, dtype="float32"), dtype)

        self.recurrent_kernel = self.add_weight(
            name="recurrent_kernel", shape=(units, 4 * units),
            initializer=recurrent_initial_value,
        )

        def bias_initializer(shape, dtype=None):
            # Gates i, f, g, o; the forget gate's bias at 1 with unit_forget_bias.
            forget = (ops.ones if self.unit_forget_bias else ops.zeros)((units,), dtype=dtype)
            zeros = ops.zeros((units,), dtype=dtype)
            return ops.concatenate([zeros, forget, zeros, zeros])

        self.bias = self.add_weight(name="bias", shape=(4 * units,), initializer=bias_initializer)

    def zero_state(self, batch_size):
        """Zero `(h, c)` for `batch_size` sequences."""
        zeros = ops.zeros((batch_size, self.units), dtype=self.compute_dtype)
        return zeros, zeros

    def call(self, inputs, initial_state=None, step_mask=None, training=False, state_index=None):
        batch_size, num_steps = ops.shape(inputs)[0], ops.shape(inputs)[1]
        if initial_state is None:
            initial_state = self.zero_state(batch_size)
        # Time-major from here to the outputs: the inputs are transposed (input_dim wide), not
        # the 4H-wide projection, and the zoneout masks are drawn time-major.
        inputs = ops.transpose(inputs, (1, 0, 2))
        projected = affine(inputs, self.kernel, self.bias)  # [T, B, 4H], hoisted
        keep_h, keep_c = self._zoneout_keep(num_steps, batch_size, training, step_mask)
        state = tuple(ops.cast(s, projected.dtype) for s in initial_state)
        index = -1 if state_index is None else state_index
        # Read (and, under a mixed policy, cast) once per call, not once per step.
        recurrent_kernel = ops.cast(self.recurrent_kernel, projected.dtype)
        if isinstance(num_steps, int) and keras.backend.backend() == "tensorflow":
            # A static length on TensorFlow: the loop unrolled when traced, with a backward
            # pass of its own (lstm_recurrence_tf). It is faster than a scan on TF and
            # differentiable under XLA, which TF's while loop without a maximum iteration count
            # (keras.ops.scan's) is not. JAX takes the scan below (`jax.lax.scan`,
            # differentiable): XLA compiles it in seconds, where the unrolled loop of a 2x650
            # LSTM over 100 steps took minutes (docs/design_notes.md).
            from psmm_tf.layers.lstm_recurrence_tf import zoneout_recurrence

            all_h, h, c = zoneout_recurrence(projected, keep_h, keep_c, *state, recurrent_kernel,
                                             index % num_steps)
            return ops.transpose(all_h, (1, 0, 2)), (h, c)
        # JAX, or a length known only at run time (a TF graph traced for any length): a scan,
        # over one tensor (keras.ops.scan on TF fails on several sequences of unknown length).
        # As in lstm_recurrence_tf: under a 16-bit policy the product stays 16-bit and the
        # cell runs in float32, its state carried in float32 within the call.
        low = keras.backend.standardize_dtype(projected.dtype)
        wide = "float32" if low in ("bfloat16", "float16") else low
        time_major = ops.concatenate([projected, keep_h, keep_c], axis=-1)
        units = self.units

        def scan_step(state, step_inputs):
            h_prev, c_prev = state
            step_inputs = ops.cast(step_inputs, wide)
            gates = step_inputs[:, :4 * units] + ops.cast(
                ops.matmul(ops.cast(h_prev, low), recurrent_kernel), wide)
            _, c_new, h_new = lstm_cell(gates, c_prev)
            state = (zoneout(h_new, h_prev, step_inputs[:, 4 * units:5 * units]),
                     zoneout(c_new, c_prev, step_inputs[:, 5 * units:]))
            return state, state

        state = tuple(ops.cast(s, wide) for s in state)
        _, (all_h, all_c) = ops.scan(scan_step, state, time_major,
                                     unroll=self.scan_unroll or default_scan_unroll())
        all_h = ops.cast(all_h, low)
        return ops.transpose(all_h, (1, 0, 2)), (all_h[index], ops.cast(all_c[index], low))

    def _zoneout_keep(self, num_steps, batch_size, training, step_mask=None):
        """Per-unit weights of the previous state: `(T, B, H)` each for h and c (time-major:
        the order the recurrence reads them in, so no transpose). Positions where `step_mask`
        `(B, T)` is 0 (no token) keep the whole state: weight 1.

        In training the weights are 0 or 1: a drawn keep or a missing position is a logical
        "or", cast once (the arithmetic `1 - valid (1 - keep)` would take three passes over
        the `(T, B, H)` masks before the first step of the recurrence;
        docs/experiments/2026-log.md, "The step's critical path")."""
        shape = (num_steps, batch_size, self.units)
        missing = None
        if step_mask is not None:
            missing = ops.logical_not(ops.cast(ops.transpose(step_mask), "bool"))[..., None]
        if training and self.zoneout > 0.0:
            library = native.library_for("zoneout_keep")
            if library is not None:  # a training step's graph on CPU
                return _native_zoneout_keep(library, shape, self.zoneout, self.seed_generator,
                                            missing, self.compute_dtype)
            if keras.backend.backend() == "tensorflow":
                kept = _bernoulli_from_16_bits((2,) + shape, self.zoneout, self.seed_generator)
            else:
                kept = keras.random.uniform((2,) + shape, seed=self.seed_generator) < self.zoneout
            if missing is not None:
                kept = ops.logical_or(kept, missing[None])
            keep = ops.cast(kept, self.compute_dtype)
            return keep[0], keep[1]
        keep = ops.full(shape, self.zoneout, dtype=self.compute_dtype)
        if missing is not None:
            keep = ops.where(missing, ops.ones((), self.compute_dtype), keep)
        return keep, keep

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "zoneout": self.zoneout,
                "seed": self.seed,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "recurrent_initializer": keras.initializers.serialize(self.recurrent_initializer),
                "unit_forget_bias": self.unit_forget_bias,
                "scan_unroll": self.scan_unroll,
            }
        )
        return config


def _stateless_seed(seed_generator):
    """The seed generator's next state as the int32 pair TensorFlow's stateless ops take, as
    Keras takes it."""
    import tensorflow as tf

    return tf.cast(tf.math.floormod(seed_generator.next(), tf.int32.max - 1), tf.int32)


def _threshold_16_bits(probability):
    """16-bit draws below it come with `probability`, to the nearest multiple of 2^-16 (at
    least 2^-16, at most 1 - 2^-16)."""
    return max(1, min(65535, round(probability * 65536)))


def _native_zoneout_keep(library, shape, probability, seed_generator, missing, dtype):
    """`_zoneout_keep`'s training weights `(T, B, H)` for h and c in one native CPU kernel
    (`psmm_tf/native/zoneout_keep.cc`): the same draws as `_bernoulli_from_16_bits`, bit
    for bit (the generator's words from the key and counter TensorFlow makes of the seed), the
    comparison, the `missing` positions `(T, B, 1)` (or None) and the cast in the same pass
    (docs/results.md, "Native kernels: per-kernel A/B")."""
    import tensorflow as tf

    num_steps, batch_size, units = shape
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=_stateless_seed(seed_generator))
    missing = (tf.zeros((num_steps, batch_size), tf.bool) if missing is None
               else missing[..., 0])
    return library.psmm_zoneout_keep(key, counter, missing, units=units,
                                     threshold=_threshold_16_bits(probability), dtype=dtype)


def _bernoulli_from_16_bits(shape, probability, seed_generator):
    """True with `probability` (to the nearest multiple of 2^-16, at least 2^-16), else
    False, drawn on TensorFlow from 16 random bits a number: each 32-bit draw of the stateless
    generator gives two, half the generator's work of a float draw a number (docs/results.md,
    "The machine's limit")."""
    import tensorflow as tf

    size = tf.reduce_prod(tf.stack([tf.cast(d, tf.int32) for d in shape]))
    words = tf.random.stateless_uniform([(size + 1) // 2], _stateless_seed(seed_generator),
                                        minval=None, maxval=None,
                                        dtype=tf.uint32)
    halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])
    static_size = tf.get_static_value(size)
    if static_size is None or static_size % 2:  # an odd count: one half more than asked for
        halves = halves[:size]
    return tf.reshape(halves < _threshold_16_bits(probability), shape)
