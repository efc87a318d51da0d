r"""The training step against the machine's matmul limit, fp32 and bf16, side by side in one run.

Rows, every one a full training step (forward, loss summed over the window's targets, gradients,
global-norm clipping at 5, SGD update) on the same random batch of the preset's shape, interleaved
round by round (A B C A B C ...) in this process so that load from elsewhere hits all alike:
  stock_keras   keras.layers.Embedding + keras.layers.LSTM x num_layers + Dense, the same
                shapes, a plain compiled step (what a user would write with stock Keras:
                a tf.function on TensorFlow, a jax.jit of `stateless_call` on JAX);
  lstm, psmm    psmm_tf's own step (`TrainStep` on TensorFlow, `JaxTrainStep` on JAX: the LSTM
                baseline and PSMM with its memory);
  lstm_tf_ops   (TensorFlow, not a default row) the LSTM step with no native kernel
                (`psmm_tf.native`: the cell and the softmax's loss as TensorFlow ops):
                what the kernels gain (per kernel: benchmarks/native_ab.py);
  matmuls       only the step's matrix products, in the step's order (each recurrence one
                product after the other, forward and backward): the floor of the step;
  largest_product  the step's largest product, `(B T, H) x (H, V)`, alone: the machine's
                matmul rate at the step's shapes, timed in the same rounds as the steps.
each under every policy of --policies. The backend is Keras' (`KERAS_BACKEND`): on a GPU host
with JAX and no TensorFlow, `KERAS_BACKEND=jax` measures the JAX step on the GPU (JAX's default
float32 matmul precision, printed, is what a user gets). Printed per row: step ms,
tokens/s, GFLOP/s of the LSTM LM's matmuls (3 x forward FLOPs per token, `backends.py`'s
count), the fraction of the matmul limit (the matmul rate's tokens/s; and the `matmuls` row's,
the floor set by the step's own products in their order), PSMM/LSTM and each policy's speed-up
over float32.

Usage:
  python benchmarks/machine_limit.py --preset=medium --rounds=10
  KERAS_BACKEND=jax python benchmarks/machine_limit.py --preset=medium --rounds=20
"""


import keras
import numpy as np
import step_setup
from absl import app, flags

FLAGS = flags.FLAGS
step_setup.define_shape_flags()
flags.adopt_module_key_flags(step_setup)  # listed in --help
flags.DEFINE_integer("rounds", 10, "Timed steps per row (after two warm-up steps).",
                     lower_bound=1)
flags.DEFINE_list("policies", ["float32", "mixed_bfloat16"], "Keras dtype policies.")
ROWS = ("stock_keras", "lstm", "psmm", "matmuls", "lstm_tf_ops")
flags.DEFINE_list("rows", ["stock_keras", "lstm", "psmm", "matmuls"],
                  f"Rows per policy, of {', '.join(ROWS)}.")
flags.register_validator("rows", lambda rows: bool(rows) and set(rows) <= set(ROWS),
                         message=f"--rows must name rows of {', '.join(ROWS)}.")

COMPUTE_DTYPES = {"float32": "float32", "mixed_bfloat16": "bfloat16",
                  "mixed_float16": "float16"}


def lstm_lm_forward_flops(model_config, vocab_size):
    """Forward matmul FLOPs per token of the LSTM LM: the layers' `2 (in + H) 4H` and the
    softmax's `2 H V` (the pointer's are not counted: the limit is the LSTM LM's)."""
    hidden = model_config.hidden_dim
    inputs = [model_config.embedding_dim] + [hidden] * (model_config.num_layers - 1)
    return sum(2 * (width + hidden) * 4 * hidden for width in inputs) + 2 * hidden * vocab_size


def stock_keras_layers(preset, policy, vocab_size):
    """Embedding, `num_layers` keras.layers.LSTM and the Dense head of the preset's sizes."""
    model_config = preset.model
    layers = [keras.layers.Embedding(vocab_size, model_config.embedding_dim, dtype=policy)]
    layers += [keras.layers.LSTM(model_config.hidden_dim, return_sequences=True,
                                 return_state=True, dtype=policy)
               for _ in range(model_config.num_layers)]
    return layers, keras.layers.Dense(vocab_size, dtype=policy)


def stock_keras_step(preset, batch, policy, vocab_size):
    """A stock Keras LSTM LM of the preset's sizes and its training step, as a callable."""
    if keras.backend.backend() == "jax":
        return stock_keras_step_jax(preset, batch, policy, vocab_size)
    import tensorflow as tf

    model_config, train = preset.model, preset.train
    layers, head = stock_keras_layers(preset, policy, vocab_size)
    optimizer = keras.optimizers.SGD(train.learning_rate)
    rows = batch["targets"].shape[0]
    tensors = {k: tf.constant(v) for k, v in batch.items()}
    zero = tf.zeros((rows, model_config.hidden_dim), COMPUTE_DTYPES[policy])
    state = [[zero, zero] for _ in range(model_config.num_layers)]

    def forward(ids, state):
        x, new_state = layers[0](ids), []
        for layer, (h, c) in zip(layers[1:], state, strict=True):
            x, h, c = layer(x, initial_state=[h, c])
            new_state.append([h, c])
        logits = tf.cast(head(x), tf.float32)
        loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
            tensors["targets"], logits)) / rows
        return loss, new_state

    forward(tensors["token_ids"], state)  # builds the layers
    variables = [v for layer in layers + [head] for v in layer.trainable_variables]

    @tf.function
    def step(ids, state):
        with tf.GradientTape() as tape:
            loss, new_state = forward(ids, state)
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), train.clip_norm)
        optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss, new_state

    def run():
        loss, state[:] = step(tensors["token_ids"], state)
        float(loss)

    return run


def stock_keras_step_jax(preset, batch, policy, vocab_size):
    """The stock Keras LSTM LM's step on JAX: `jax.jit` of `stateless_call`, its gradient,
    global-norm clipping and `optimizer.stateless_apply`, the state carried."""
    import jax
    import jax.numpy as jnp

    model_config, train = preset.model, preset.train
    rows, hidden = batch["targets"].shape[0], model_config.hidden_dim
    layers, head = stock_keras_layers(preset, policy, vocab_size)
    ids = keras.Input((batch["token_ids"].shape[1],), batch_size=rows, dtype="int32")
    states = [keras.Input((hidden,), batch_size=rows, dtype=COMPUTE_DTYPES[policy])
              for _ in range(2 * model_config.num_layers)]
    x, new_states = layers[0](ids), []
    for layer, h, c in zip(layers[1:], states[::2], states[1::2], strict=True):
        x, h, c = layer(x, initial_state=[h, c])
        new_states += [h, c]
    model = keras.Model([ids] + states, [head(x)] + new_states)
    optimizer = keras.optimizers.SGD(train.learning_rate)
    optimizer.build(model.trainable_variables)

    def loss_fn(trainable, non_trainable, ids, targets, states):
        outputs, non_trainable = model.stateless_call(trainable, non_trainable, [ids] + states)
        log_probs = jax.nn.log_softmax(outputs[0].astype("float32"))
        loss = -jnp.sum(jnp.take_along_axis(log_probs, targets[..., None], axis=-1)) / rows
        return loss, outputs[1:]

    @jax.jit
    def step(trainable, non_trainable, optimizer_values, ids, targets, states):
        (loss, states), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            trainable, non_trainable, ids, targets, states)
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype("float32"))) for g in grads))
        scale = jnp.minimum(1.0, train.clip_norm / norm)
        grads = [g * scale.astype(g.dtype) for g in grads]
        trainable, optimizer_values = optimizer.stateless_apply(optimizer_values, grads,
                                                                trainable)
        return loss, trainable, optimizer_values, states

    values = [[v.value for v in model.trainable_variables],
              [v.value for v in model.non_trainable_variables],
              [v.value for v in optimizer.variables]]
    state = [jnp.zeros((rows, hidden), COMPUTE_DTYPES[policy]) for _ in states]
    ids, targets = jnp.asarray(batch["token_ids"]), jnp.asarray(batch["targets"])

    def run():
        loss, values[0], values[2], state[:] = step(values[0], values[1], values[2], ids,
                                                    targets, state)
        float(loss)

    return run


def matmuls_step(preset, policy, vocab_size):
    """Only the step's matrix products, in the step's order, as a callable: per layer the input
    projection and the T recurrent products, each depending on the one before (a recurrence
    cannot run two at a time), the softmax, and the backward products the same way (the
    recurrent `dz U^T` chain from the top layer down, then `dU`, `dW` and the input's gradient,
    which feeds the layer below). The floor of the step at this machine's matmul speed for
    these shapes. `keras.ops`, compiled by the backend (`tf.function`, `jax.jit`)."""
    from keras import ops

    model_config, train = preset.model, preset.train
    rows, steps = train.batch_size, train.num_predicted
    hidden, dtype = model_config.hidden_dim, COMPUTE_DTYPES[policy]
    rng = np.random.default_rng(0)

    def constant(*shape):
        return ops.cast(rng.normal(size=shape).astype(np.float32) * 0.01, dtype)

    widths = [model_config.embedding_dim] + [hidden] * (model_config.num_layers - 1)
    arguments = {"inputs": constant(rows * steps, widths[0]),
                 "kernels": [constant(w, 4 * hidden) for w in widths],
                 "recurrent": constant(hidden, 4 * hidden), "h0": constant(rows, hidden),
                 "softmax": constant(hidden, vocab_size),
                 "d_logits": constant(rows * steps, vocab_size)}
    # The backward recurrent product in the form the TensorFlow step uses: float32 reads a
    # stored U^T (psmm_tf/layers/lstm_recurrence_tf.py), 16 bits a transposed operand.
    stored_transpose = keras.backend.backend() == "tensorflow" and dtype == "float32"
    arguments["recurrent_t"] = (ops.convert_to_tensor(np.asarray(ops.transpose(
        arguments["recurrent"]))) if stored_transpose else None)
    # The weights' gradients X^T dY in the form the TensorFlow step takes (bfloat16: the
    # transpose of dY^T X, psmm_tf.layers.dense.weight_gradient).
    if keras.backend.backend() == "tensorflow":
        from psmm_tf.layers.dense import weight_gradient
    else:
        def weight_gradient(x, d):
            return ops.matmul(ops.transpose(x), d)
    products = recurrent_products(dtype)

    def step(a):
        times_recurrent, times_recurrent_t = products(a)
        x, layer_inputs, layer_outputs = a["inputs"], [], []
        for kernel in a["kernels"]:
            layer_inputs.append(x)
            projected, h, all_h = ops.matmul(x, kernel), a["h0"], []
            for t in range(steps):
                h = (times_recurrent(h) + projected[t * rows:(t + 1) * rows])[:, :hidden]
                all_h.append(h)
            x = ops.concatenate(all_h, axis=0)  # (T B, H): the next layer's input
            layer_outputs.append(x)
        outputs = [ops.matmul(x, a["softmax"])[0, 0]]
        d_x = ops.matmul(a["d_logits"], ops.transpose(a["softmax"]))
        outputs.append(weight_gradient(x, a["d_logits"])[0, 0])
        for kernel, x, h_all in zip(reversed(a["kernels"]), reversed(layer_inputs),
                                    reversed(layer_outputs), strict=True):
            d_gates, all_d = ops.tile(d_x[:rows], (1, 4)), []
            for _ in range(steps):
                d_gates = ops.tile(times_recurrent_t(d_gates), (1, 4))
                all_d.append(d_gates)
            d_all = ops.concatenate(all_d, axis=0)  # (T B, 4H)
            outputs.append(weight_gradient(h_all, d_all)[0, 0])  # dU
            outputs.append(weight_gradient(x, d_all)[0, 0])  # dW
            d_x = ops.matmul(d_all, ops.transpose(kernel))  # the layer below's input gradient
        outputs.append(d_x[0, 0])
        return sum(ops.cast(o, "float32") for o in outputs)

    compiled = backend_compiled(step)
    return lambda: float(compiled(arguments))


def recurrent_products(dtype):
    """A function of the step's arguments giving `h -> h U` and `dz -> dz U^T` as the
    TensorFlow step takes them (`lstm_recurrence_tf`): on a CPU with AVX512-BF16 (bfloat16) or
    AVX-512 (float32), psmm_tf's native product on `U` packed once per step (where the native
    kernels build); else oneDNN's products, `dz U^T` on a stored `U^T` in float32."""
    from keras import ops

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        from psmm_tf import native
        from psmm_tf.layers import lstm_recurrence_tf

        library = native.library_for("recurrent_product", tf.as_dtype(dtype), use=True)
        if library is not None:
            return lambda a: tuple(lstm_recurrence_tf._times_packed(library, a["recurrent"],
                                                                    transpose)
                                   for transpose in (False, True))

    def products(a):
        recurrent_t = (ops.transpose(a["recurrent"]) if a["recurrent_t"] is None
                       else a["recurrent_t"])
        return (lambda h: ops.matmul(h, a["recurrent"])), (lambda d: ops.matmul(d, recurrent_t))

    return products


def largest_product_step(preset, policy, vocab_size):
    """A callable computing `(B T, H) x (H, V)`, the step's largest product, once."""
    from keras import ops

    rows = preset.train.batch_size * preset.train.num_predicted
    hidden, dtype = preset.model.hidden_dim, COMPUTE_DTYPES[policy]
    rng = np.random.default_rng(1)
    arguments = {"a": ops.cast(rng.normal(size=(rows, hidden)).astype(np.float32), dtype),
                 "b": ops.cast(rng.normal(size=(hidden, vocab_size)).astype(np.float32), dtype)}
    product = backend_compiled(
        lambda x: ops.sum(ops.cast(ops.matmul(x["a"], x["b"])[0, :1], "float32")))
    return lambda: float(product(arguments))


def backend_compiled(function):
    """`function` compiled by the Keras backend's compiler: `jax.jit` or `tf.function`."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(function)
    import tensorflow as tf

    return tf.function(function)


def own_step(preset, batch, row, policy, vocab_size):
    """psmm_tf's own training step of `row` ("lstm" or "psmm") under `policy`, as a callable:
    `TrainStep` on TensorFlow, `JaxTrainStep` on JAX."""
    tf_ops = row == "lstm_tf_ops"
    if tf_ops and keras.backend.backend() != "tensorflow":
        raise ValueError("lstm_tf_ops compares TensorFlow's native kernels: TensorFlow only")
    kind = "lstm" if tf_ops else row
    model, optimizer = step_setup.model_and_optimizer(preset, kind, vocab_size, dtype=policy)
    settings = step_setup.step_settings(preset, use_memory=kind == "psmm")
    if keras.backend.backend() == "jax":
        return step_setup.jax_step(model, optimizer, batch, settings)
    run = step_setup.tensorflow_step(model, optimizer, batch, settings)
    if not tf_ops:
        return run
    from psmm_tf import native

    def run_without_native():
        with native.disabled():  # the first call traces the step
            run()

    return run_without_native


def device_line():
    """The backend and the device the steps run on."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return (f"backend jax {jax.__version__} on {device.platform} ({device.device_kind}); "
                f"float32 matmul precision {jax.config.jax_default_matmul_precision or 'default'}")
    import tensorflow as tf

    return f"backend tensorflow {tf.__version__} on CPU"


def main(argv):
    del argv
    preset = step_setup.shaped_preset(FLAGS.preset, FLAGS.batch_size, FLAGS.bptt)
    batch = step_setup.random_batch(preset, FLAGS.vocab_size, np.random.default_rng(0))
    tokens = batch["targets"].size
    flops = 3 * lstm_lm_forward_flops(preset.model, FLAGS.vocab_size) * tokens
    runners = {}
    for policy in FLAGS.policies:
        runners[f"largest_product/{policy}"] = largest_product_step(preset, policy,
                                                                    FLAGS.vocab_size)
        for row in FLAGS.rows:
            name = f"{row}/{policy}"
            if row == "stock_keras":
                runners[name] = stock_keras_step(preset, batch, policy, FLAGS.vocab_size)
            elif row == "matmuls":
                runners[name] = matmuls_step(preset, policy, FLAGS.vocab_size)
            else:
                runners[name] = own_step(preset, batch, row, policy, FLAGS.vocab_size)
    unavailable = {}
    for name, runner in list(runners.items()):
        try:
            runner()  # traces and compiles; a row this backend or device cannot run is named
        except Exception as error:  # noqa: BLE001 (reported, and the other rows run)
            unavailable[name] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
            del runners[name]
    times = {name: float(np.median(t))
             for name, t in step_setup.interleaved_times(runners, FLAGS.rounds).items()}
    product_flops = (2 * tokens * preset.model.hidden_dim * FLAGS.vocab_size)
    rates = {policy: product_flops / times.pop(f"largest_product/{policy}") / 1e9
             for policy in FLAGS.policies if f"largest_product/{policy}" in times}
    for name in [name for name in times if name.split("/")[1] not in rates]:
        unavailable[name] = "no matmul rate under this policy (its largest product failed)"
        del times[name]
    print(device_line())
    print(f"preset {FLAGS.preset}: B={preset.train.batch_size} T={preset.train.num_predicted} "
          f"V={FLAGS.vocab_size}, {tokens} tokens per step, {flops / tokens / 1e6:.1f} MFLOP "
          f"per token (LSTM LM matmuls, 3 x forward); medians of {FLAGS.rounds} steps")
    for policy in rates:
        limit = flops / (rates[policy] * 1e9)
        print(f"{policy}: the largest product at {rates[policy]:.0f} GFLOP/s -> limit "
              f"{tokens / limit:.0f} tokens/s ({1000 * limit:.1f} ms per step)")
    print(f"{'row':28} {'step ms':>8} {'tokens/s':>9} {'GFLOP/s':>8} {'of limit':>9} "
          f"{'of matmuls':>11} {'psmm/lstm':>10} {'vs float32':>11}")
    for name, reason in unavailable.items():
        print(f"{name:28} not measured: {reason}")
    for name, seconds in times.items():
        row, policy = name.split("/")
        limit = flops / (rates[policy] * 1e9)
        matmuls = times.get(f"matmuls/{policy}")
        ratio = (f"{seconds / times[f'lstm/{policy}']:10.3f}"
                 if row == "psmm" and f"lstm/{policy}" in times else " " * 10)
        speedup = (f"{times[f'{row}/float32'] / seconds:11.2f}"
                   if f"{row}/float32" in times else " " * 11)
        of_matmuls = f"{matmuls / seconds:11.2f}" if matmuls else " " * 11
        print(f"{name:28} {1000 * seconds:8.1f} {tokens / seconds:9.0f} "
              f"{flops / seconds / 1e9:8.0f} {limit / seconds:9.2f} {of_matmuls} {ratio} "
              f"{speedup}", flush=True)


if __name__ == "__main__":
    app.run(main)
