r"""The training step's matrix products in each form TensorFlow can take them, float32 against
bfloat16, side by side in one process.

A product's form (which operand is read transposed, which dimension is summed over) does not
change its FLOPs, but oneDNN's speed on CPU differs by form, and differently in float32 and
bfloat16. For each of the preset's product shapes (the input projection `(B T, E) x (E, 4H)`,
the vocabulary head `(B T, H) x (H, V)`) the rows time:
  forward x W              the layer's output.
  forward x W^T            the same with the kernel stored (out, in).
  input gradient dY W^T    the layer's input's gradient (W stored (in, out)).
  weight gradient X^T dY   the kernel's gradient in TensorFlow's own form.
  weight gradient (dY^T X)^T  the same in `psmm_tf.layers.dense.weight_gradient`'s bfloat16
                           form, its transpose included.
  dY^T X alone             that form's product without the transpose.
Each time is the median over `--rounds` calls of `--repeats` independent products (distinct
operands, so that the graph optimizer cannot merge them), per product; dtypes interleaved.
docs/experiments/2026-log.md, "The weights' gradients in the faster form", has the numbers.

Usage:
  python benchmarks/product_forms.py --preset=medium --rounds=15
"""

import time

import numpy as np
import step_setup
from absl import app, flags

FLAGS = flags.FLAGS
step_setup.define_shape_flags()
flags.adopt_module_key_flags(step_setup)  # listed in --help
flags.DEFINE_integer("rounds", 15, "Timed calls per form and dtype (after one warm-up).",
                     lower_bound=1)
flags.DEFINE_integer("repeats", 3, "Independent products per call.", lower_bound=1)

FORMS = {
    "forward x W": (("rows", "in"), ("in", "out"),
                    lambda tf, x, w: tf.matmul(x, w)),
    "forward x W^T, W (out, in)": (("rows", "in"), ("out", "in"),
                                   lambda tf, x, w: tf.matmul(x, w, transpose_b=True)),
    "input gradient dY W^T": (("rows", "out"), ("in", "out"),
                              lambda tf, d, w: tf.matmul(d, w, transpose_b=True)),
    "weight gradient X^T dY": (("rows", "in"), ("rows", "out"),
                               lambda tf, x, d: tf.matmul(x, d, transpose_a=True)),
    "weight gradient (dY^T X)^T": (("rows", "in"), ("rows", "out"),
                                   lambda tf, x, d: tf.transpose(
                                       tf.matmul(d, x, transpose_a=True))),
    "dY^T X alone": (("rows", "in"), ("rows", "out"),
                     lambda tf, x, d: tf.matmul(d, x, transpose_a=True)),
}


def form_runner(tf, dtype, dims, shapes, form, repeats, rng):
    """A callable computing `repeats` products of `form` on distinct operands of `dtype`."""
    operands = [[tf.cast(rng.normal(size=[dims[d] for d in shape]).astype(np.float32) * 0.01,
                         dtype) for shape in shapes] for _ in range(repeats)]

    @tf.function
    def run(operands):
        return tf.add_n([tf.cast(form(tf, *pair)[0, 0], tf.float32) for pair in operands])

    return lambda: float(run(operands))


def main(argv):
    del argv
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # one trace per runner is by design, not a retrace
    preset = step_setup.shaped_preset(FLAGS.preset, FLAGS.batch_size, FLAGS.bptt)
    rows = preset.train.batch_size * preset.train.num_predicted
    model = preset.model
    layers = {"projection": (model.embedding_dim, 4 * model.hidden_dim),
              "vocabulary head": (model.hidden_dim, FLAGS.vocab_size)}
    rng = np.random.default_rng(0)
    print(f"backend tensorflow {tf.__version__}; preset {FLAGS.preset}: {rows} rows; medians "
          f"of {FLAGS.rounds} calls of {FLAGS.repeats} products, ms per product")
    print(f"{'layer':16s} {'form':30s} {'float32':>9s} {'bfloat16':>9s} {'f32/bf16':>9s}")
    for layer, (width_in, width_out) in layers.items():
        dims = {"rows": rows, "in": width_in, "out": width_out}
        runners = {(name, dtype): form_runner(tf, dtype, dims, shapes[:2], shapes[2],
                                              FLAGS.repeats, rng)
                   for name, shapes in FORMS.items() for dtype in (tf.float32, tf.bfloat16)}
        times = {key: [] for key in runners}
        for run in runners.values():
            run()  # trace and warm up
        for _ in range(FLAGS.rounds):
            for key, run in runners.items():
                start = time.perf_counter()
                run()
                times[key].append((time.perf_counter() - start) / FLAGS.repeats * 1e3)
        for name in FORMS:
            f32 = np.median(times[(name, tf.float32)])
            b16 = np.median(times[(name, tf.bfloat16)])
            print(f"{layer:16s} {name:30s} {f32:9.2f} {b16:9.2f} {f32 / b16:9.2f}", flush=True)


if __name__ == "__main__":
    app.run(main)
