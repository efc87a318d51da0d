r"""The training step against the machine's matmul limit, fp32 and bf16, side by side in one run.

Rows, every one a full training step (forward, loss summed over the window's targets, gradients,
global-norm clipping at 5, SGD update) on the same random batch of the preset's shape, interleaved
round by round (A B C A B C ...) in this process so that load from elsewhere hits all alike:
  stock_keras   keras.layers.Embedding + keras.layers.LSTM x num_layers + Dense, the same
                shapes, a plain tf.function step (what a user would write with stock Keras);
  lstm, psmm    psmm_tf's own step (`TrainStep`: the LSTM baseline and PSMM with its memory);
  matmuls       only the step's matrix products: per layer the input projection and the T
                recurrent products, the softmax, each with its two backward products.
each under every policy of --policies. It also times the step's largest product, `(B T, H) x
(H, V)`, alone: the machine's matmul rate at the step's shapes. Printed per row: step ms,
tokens/s, GFLOP/s of the LSTM LM's matmuls (3 x forward FLOPs per token, `backends.py`'s
count), the fraction of the matmul limit (the matmul rate's tokens/s; and the `matmuls` row's,
the limit at the step's own small recurrent products), PSMM/LSTM and each policy's speed-up
over float32.

Usage:
  python benchmarks/machine_limit.py --preset=medium --rounds=10
"""

import time

import keras
import numpy as np
import step_setup
import tensorflow as tf
from absl import app, flags

FLAGS = flags.FLAGS
step_setup.define_shape_flags()
flags.adopt_module_key_flags(step_setup)  # listed in --help
flags.DEFINE_integer("rounds", 10, "Timed steps per row (after two warm-up steps).",
                     lower_bound=1)
flags.DEFINE_list("policies", ["float32", "mixed_bfloat16"], "Keras dtype policies.")
flags.DEFINE_list("rows", ["stock_keras", "lstm", "psmm", "matmuls"], "Rows per policy.")

COMPUTE_DTYPES = {"float32": tf.float32, "mixed_bfloat16": tf.bfloat16,
                  "mixed_float16": tf.float16}


def lstm_lm_forward_flops(model_config, vocab_size):
    """Forward matmul FLOPs per token of the LSTM LM: the layers' `2 (in + H) 4H` and the
    softmax's `2 H V` (the pointer's are not counted: the limit is the LSTM LM's)."""
    hidden = model_config.hidden_dim
    inputs = [model_config.embedding_dim] + [hidden] * (model_config.num_layers - 1)
    return sum(2 * (width + hidden) * 4 * hidden for width in inputs) + 2 * hidden * vocab_size


def stock_keras_step(preset, batch, policy, vocab_size):
    """A stock Keras LSTM LM of the preset's sizes and its training step, as a callable."""
    model_config, train = preset.model, preset.train
    layers = [keras.layers.Embedding(vocab_size, model_config.embedding_dim, dtype=policy)]
    layers += [keras.layers.LSTM(model_config.hidden_dim, return_sequences=True,
                                 return_state=True, dtype=policy)
               for _ in range(model_config.num_layers)]
    head = keras.layers.Dense(vocab_size, dtype=policy)
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


def matmuls_step(preset, policy, vocab_size):
    """Only the step's matrix products (forward and both backward ones), as a callable."""
    model_config, train = preset.model, preset.train
    rows, steps = train.batch_size, train.num_predicted
    hidden, dtype = model_config.hidden_dim, COMPUTE_DTYPES[policy]
    rng = np.random.default_rng(0)

    def constant(*shape):
        return tf.constant(rng.normal(size=shape).astype(np.float32) * 0.01, dtype)

    widths = [model_config.embedding_dim] + [hidden] * (model_config.num_layers - 1)
    layers = [(constant(rows * steps, w), constant(w, 4 * hidden)) for w in widths]
    recurrent, h, d_gates = constant(hidden, 4 * hidden), constant(rows, hidden), constant(
        rows, 4 * hidden)
    d_all_gates, softmax_in = constant(rows * steps, 4 * hidden), constant(rows * steps, hidden)
    softmax, d_logits = constant(hidden, vocab_size), constant(rows * steps, vocab_size)

    def forward_backward(x, w, dy):  # y = x w; dx = dy w^T; dw = x^T dy
        return [tf.matmul(x, w), tf.matmul(dy, w, transpose_b=True),
                tf.matmul(x, dy, transpose_a=True)]

    @tf.function
    def step():
        products = []
        for x, w in layers:
            products += forward_backward(x, w, d_all_gates)
            for _ in range(steps):
                products += forward_backward(h, recurrent, d_gates)
        products += forward_backward(softmax_in, softmax, d_logits)
        return tf.add_n([tf.cast(p[0, 0], tf.float32) for p in products])

    return lambda: float(step())


def largest_product_rate(preset, policy, vocab_size, repeats=20):
    """GFLOP/s of `(B T, H) x (H, V)`, the step's largest product, timed alone."""
    rows = preset.train.batch_size * preset.train.num_predicted
    hidden, dtype = preset.model.hidden_dim, COMPUTE_DTYPES[policy]
    a = tf.cast(tf.random.normal((rows, hidden)), dtype)
    b = tf.cast(tf.random.normal((hidden, vocab_size)), dtype)
    product = tf.function(lambda: tf.reduce_sum(tf.cast(tf.matmul(a, b)[0, :1], tf.float32)))
    product()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        float(product())
        times.append(time.perf_counter() - start)
    return 2 * rows * hidden * vocab_size / float(np.median(times)) / 1e9


def main(argv):
    del argv
    preset = step_setup.shaped_preset(FLAGS.preset, FLAGS.batch_size, FLAGS.bptt)
    batch = step_setup.random_batch(preset, FLAGS.vocab_size, np.random.default_rng(0))
    tokens = batch["targets"].size
    flops = 3 * lstm_lm_forward_flops(preset.model, FLAGS.vocab_size) * tokens
    runners = {}
    for policy in FLAGS.policies:
        for row in FLAGS.rows:
            name = f"{row}/{policy}"
            if row == "stock_keras":
                runners[name] = stock_keras_step(preset, batch, policy, FLAGS.vocab_size)
            elif row == "matmuls":
                runners[name] = matmuls_step(preset, policy, FLAGS.vocab_size)
            else:
                model, optimizer = step_setup.model_and_optimizer(preset, row, FLAGS.vocab_size,
                                                                  dtype=policy)
                runners[name] = step_setup.tensorflow_step(
                    model, optimizer, batch, step_setup.step_settings(
                        preset, use_memory=row == "psmm"))
    rates = {policy: largest_product_rate(preset, policy, FLAGS.vocab_size)
             for policy in FLAGS.policies}
    times = {name: float(np.median(t))
             for name, t in step_setup.interleaved_times(runners, FLAGS.rounds).items()}
    print(f"preset {FLAGS.preset}: B={preset.train.batch_size} T={preset.train.num_predicted} "
          f"V={FLAGS.vocab_size}, {tokens} tokens per step, {flops / tokens / 1e6:.1f} MFLOP "
          f"per token (LSTM LM matmuls, 3 x forward); medians of {FLAGS.rounds} steps")
    for policy in FLAGS.policies:
        limit = flops / (rates[policy] * 1e9)
        print(f"{policy}: the largest product at {rates[policy]:.0f} GFLOP/s -> limit "
              f"{tokens / limit:.0f} tokens/s ({1000 * limit:.1f} ms per step)")
    print(f"{'row':28} {'step ms':>8} {'tokens/s':>9} {'GFLOP/s':>8} {'of limit':>9} "
          f"{'of matmuls':>11} {'psmm/lstm':>10} {'vs float32':>11}")
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
