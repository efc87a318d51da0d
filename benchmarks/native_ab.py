r"""Per-kernel A/B of psmm_tf's native kernels: what each gains of the training step, one process.

Rows, every one psmm_tf's own training step (`TrainStep`, TensorFlow) of the same model kind on
the same random batch, interleaved round by round (A B C A B C ...) so that load from
elsewhere hits all alike:
  all           every native kernel that runs on this CPU;
  none          no native kernel (TensorFlow ops only: the reference path);
  only:K        kernel K alone;
  all_but:K     every kernel but K.
Printed per kernel K: its share of the step alone, `1 - only:K / none`, and in context,
`1 - all / all_but:K` (what removing it would cost), each the median over rounds of the ratio
of the two rows' steps in that round (paired: a round's load hits both), with its quartiles.
A kernel is kept only where it gains at least 3% of the step on the CPUs it targets
(docs/results.md, "Native kernels: per-kernel A/B").
Kernels written for other CPUs (the packed recurrent products need AVX-512 for float32 and
AVX512-BF16 for bfloat16) are named and not measured.

Usage:
  python benchmarks/native_ab.py --preset=small --rounds=10 --cache_dir=/tmp/psmm_kernels
"""

import numpy as np
import step_setup
from absl import app, flags

FLAGS = flags.FLAGS
step_setup.define_shape_flags()
flags.adopt_module_key_flags(step_setup)  # listed in --help
flags.DEFINE_integer("rounds", 10, "Timed steps per row (after two warm-up steps).",
                     lower_bound=1)
flags.DEFINE_string("policy", "float32", "Keras dtype policy of the steps.")
flags.DEFINE_enum("kind", "psmm", ["psmm", "lstm"], "Model kind of the steps.")
flags.DEFINE_string("cache_dir", "~/.cache/psmm_tf", "The native kernels' build folder.")
flags.DEFINE_string("compiler", "g++", "The C++ compiler the kernels build with.")

CPU_FLAG = {("recurrent_product", "float32"): "avx512f",
            ("recurrent_product", "bfloat16"): "avx512_bf16"}


def measured_kernels(native, compute_dtype):
    """(kernels this CPU runs, {kernel: why not measured})."""
    kept, skipped = [], {}
    for kernel in native.KERNELS:
        flag = CPU_FLAG.get((kernel, compute_dtype), "" if kernel != "recurrent_product"
                            else None)
        if flag is None or (flag and flag not in native.cpu_flags()):
            skipped[kernel] = (f"written for CPUs with {flag or 'AVX-512'}, which this one "
                               f"lacks")
        else:
            kept.append(kernel)
    return kept, skipped


def _paired_share(with_kernel, without):
    """`1 - with / without` per round: its median and quartiles, in percent, as text."""
    shares = 100 * (1 - np.asarray(with_kernel) / np.asarray(without))
    low, median, high = np.percentile(shares, [25, 50, 75])
    return f"{median:5.1f}% [{low:5.1f}, {high:5.1f}]"


def main(argv):
    del argv
    from psmm_tf import native

    native.configure(mode="on", cache_dir=FLAGS.cache_dir, compiler=FLAGS.compiler)
    native.library()  # built (or the reason it cannot be) before any timing
    preset = step_setup.shaped_preset(FLAGS.preset, FLAGS.batch_size, FLAGS.bptt)
    batch = step_setup.random_batch(preset, FLAGS.vocab_size, np.random.default_rng(0))
    compute_dtype = {"float32": "float32", "mixed_bfloat16": "bfloat16",
                     "mixed_float16": "float16"}[FLAGS.policy]
    kernels, skipped = measured_kernels(native, compute_dtype)
    rows = {"all": kernels, "none": []}
    for kernel in kernels:
        rows[f"only:{kernel}"] = [kernel]
        rows[f"all_but:{kernel}"] = [k for k in kernels if k != kernel]
    runners = {}
    for name, allowed in rows.items():
        model, optimizer = step_setup.model_and_optimizer(preset, FLAGS.kind, FLAGS.vocab_size,
                                                          dtype=FLAGS.policy)
        settings = step_setup.step_settings(preset, use_memory=FLAGS.kind == "psmm")
        run = step_setup.tensorflow_step(model, optimizer, batch, settings)

        def runner(run=run, allowed=tuple(allowed)):
            with native.only(*allowed):  # decides at the first call's trace
                run()

        runners[name] = runner
    samples = step_setup.interleaved_times(runners, FLAGS.rounds)
    times = {name: float(np.median(t)) for name, t in samples.items()}
    print(f"preset {FLAGS.preset} {FLAGS.kind} {FLAGS.policy}: B={preset.train.batch_size} "
          f"T={preset.train.num_predicted} V={FLAGS.vocab_size}; medians of {FLAGS.rounds} "
          f"interleaved steps")
    for name, seconds in times.items():
        low, high = np.percentile(samples[name], [25, 75])
        print(f"  {name:30} {1000 * seconds:8.1f} ms  (quartiles {1000 * low:.1f}-"
              f"{1000 * high:.1f})")
    print(f"{'kernel':20} {'alone':>22} {'in context':>22}   (share of the step it saves: "
          f"median [quartiles] of the rounds' paired ratios)")
    for kernel in kernels:
        alone = _paired_share(samples[f"only:{kernel}"], samples["none"])
        context = _paired_share(samples["all"], samples[f"all_but:{kernel}"])
        print(f"{kernel:20} {alone:>22} {context:>22}")
    print(f"{'all kernels':20} {_paired_share(samples['all'], samples['none']):>22}")
    for kernel, reason in skipped.items():
        print(f"{kernel:20} not measured: {reason}")


if __name__ == "__main__":
    app.run(main)
