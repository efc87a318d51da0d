r"""Evaluates a trained run: exact perplexity, gate statistics, Figure 4 and an attention page.

Reads a training workdir (config.json, vocab.txt, model.keras or checkpoints/) and writes into
--output_dir (default: <workdir>/evaluation_<split>):
  metrics.json             perplexity, gate statistics (and the Figure 4 rows with a baseline)
  attention.html           window words shaded by pointer attention, with the gate (Figs. 5-12)
  frequency_buckets.md     with --baseline_workdir: mean difference in log perplexity between
  frequency_buckets.png    the baseline and the model over 10 word-frequency buckets (Fig. 4)

Example:
  psmm-evaluate --workdir=/tmp/psmm_quickstart/psmm \
      --baseline_workdir=/tmp/psmm_quickstart/lstm --split=test
"""

import logging
import sys

from absl import app, flags

FLAGS = flags.FLAGS

flags.DEFINE_string("workdir", None, "The training run to evaluate.")
flags.DEFINE_string("baseline_workdir", None, "A run of the comparison model (e.g. the LSTM) "
                    "with the same vocabulary, for the word-frequency analysis.")
flags.DEFINE_enum("split", "test", ["train", "valid", "test"], "Split (role) to evaluate.")
flags.DEFINE_string("output_dir", None, "Where the report goes (default: "
                    "<workdir>/evaluation_<split>).")
flags.DEFINE_string("data_dir", None, "Where the corpus files are, if they moved since training.")
flags.DEFINE_integer("max_tokens", None, "Evaluate the first tokens of the split only.",
                     lower_bound=2)
flags.DEFINE_integer("batch_size", 1, "Streams read side by side (1: exact).", lower_bound=1)
flags.DEFINE_integer("length", None, "Tokens per evaluation step (speed only).", lower_bound=1)
flags.DEFINE_integer("num_buckets", 10, "Word-frequency buckets (paper: 10).", lower_bound=1)
flags.DEFINE_enum("bucket_by", "types", ["types", "tokens"], "Equal-size buckets of word "
                  "types (sorted by training count), or of training tokens.")
flags.DEFINE_list("positions", None, "Target indices for the attention page (default: where "
                  "the pointer took most mass, and a few random ones).")
flags.DEFINE_integer("num_examples", 8, "Examples on the attention page when --positions is "
                     "not given.", lower_bound=1)
flags.register_validator("workdir", bool, message="is required: a training run's folder.")


def _positions():
    if FLAGS.positions is None:
        return None
    try:
        values = [int(p) for p in FLAGS.positions]
    except ValueError:
        sys.exit(f"FATAL Flags error: --positions must be a comma-separated list of integers, "
                 f"got {','.join(FLAGS.positions)!r}.")
    if any(v < 0 for v in values):
        sys.exit("FATAL Flags error: --positions must be target indices >= 0.")
    return values


def _main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    # TensorFlow's own INFO lines (one per checkpoint shard) would drown the progress.
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    from pathlib import Path

    workdir = Path(FLAGS.workdir)
    for needed in ("config.json", "vocab.txt"):
        if not (workdir / needed).is_file():
            sys.exit(f"FATAL Flags error: --workdir={workdir} has no {needed}; expected the "
                     "folder of a training run.")
    positions = _positions()
    from psmm_tf.training import evaluation_report

    output_dir = FLAGS.output_dir or workdir / f"evaluation_{FLAGS.split}"
    metrics = evaluation_report.evaluation_report(
        workdir, output_dir, split=FLAGS.split, baseline_workdir=FLAGS.baseline_workdir,
        data_dir=FLAGS.data_dir, max_tokens=FLAGS.max_tokens, batch_size=FLAGS.batch_size,
        length=FLAGS.length, num_buckets=FLAGS.num_buckets, bucket_by=FLAGS.bucket_by,
        positions=positions, num_examples=FLAGS.num_examples)
    print(f"{metrics['model']} {FLAGS.split} perplexity {metrics['perplexity']:.2f} "
          f"({metrics['num_targets']} targets), mean gate {metrics['gate']['mean']:.3f}")
    if "baseline_perplexity" in metrics:
        print(f"baseline {FLAGS.split} perplexity {metrics['baseline_perplexity']:.2f}; ratio "
              f"{metrics['perplexity'] / metrics['baseline_perplexity']:.3f}")
        print((Path(output_dir) / "frequency_buckets.md").read_text())
    print(f"report written to {output_dir}")


def main():
    """Console-script entry point (`psmm-evaluate`)."""
    app.run(_main)


if __name__ == "__main__":
    main()
