r"""psmm-evaluate: exact perplexity, gate statistics, Figure 4 and an attention page of a run.

Usage examples:
  # The PSMM run of the quick start against its LSTM baseline (Figure 4 needs
  # pip install "psmm_tf[plots]").
  psmm-evaluate --workdir=/tmp/psmm_quickstart/psmm \
      --baseline_workdir=/tmp/psmm_quickstart/lstm --split=test

  # The LSTM run with a neural cache of 100 states, theta and lambda tuned on valid.
  psmm-evaluate --workdir=/tmp/psmm_quickstart/lstm --cache_window=100 --cache_grid

Reads a training workdir (config.json, vocab.txt, model.keras or checkpoints/) and writes into
--output_dir (default: <workdir>/evaluation_<split>):
  metrics.json             perplexity, gate statistics (and the Figure 4 rows with a baseline)
  attention.html           window words shaded by pointer attention, with the gate (Figs. 5-12)
  frequency_buckets.md     with --baseline_workdir: mean difference in log perplexity between
  frequency_buckets.png    the baseline and the model over 10 word-frequency buckets (Fig. 4)

With --cache_window, the run is also evaluated with a neural cache (Grave et al. 2017):
p = (1 - lambda) p_model + lambda p_cache over the last --cache_window hidden states, with
--cache_theta and --cache_lambda, or with the pair a grid search on the valid split picks
(--cache_grid); the scores go under "neural_cache" in metrics.json.
"""

import logging
import sys

from absl import flags

from psmm_tf import cli, configs

FLAGS = flags.FLAGS

flags.DEFINE_string("workdir", None, "The training run to evaluate.")
flags.DEFINE_string("baseline_workdir", None, "A run of the comparison model (e.g. the LSTM) "
                    "with the same vocabulary, for the word-frequency analysis.")
flags.DEFINE_enum("split", "test", list(configs.SPLITS), "Split (role) to evaluate.")
flags.DEFINE_string("output_dir", None, "Where the report goes (default: "
                    "<workdir>/evaluation_<split>); it replaces an earlier report's files there.")
flags.DEFINE_enum("model_source", "best", ["best", "latest"], "The run's model to evaluate: "
                  "best (model.keras, the best by validation perplexity) or latest (the newest "
                  "checkpoint); the output names it.")
flags.DEFINE_enum("mixed_precision", None, list(configs.PRECISION_POLICIES),
                  "Keras dtype policy to score in instead of the run's own (e.g. float32 for a "
                  "run trained under mixed_bfloat16: the same float32 weights).")
flags.DEFINE_bool("trained_gate", False, "Score PSMM with its gate as trained, without the "
                  "calibration psmm-train fitted on valid (the paper's model).")
flags.DEFINE_string("data_dir", None, "Where the corpus files are, if they moved since "
                    "training (real corpora only; read, never written).")
flags.DEFINE_string("tfds_data_dir", None, "Where the corpus is prepared as a TFDS dataset, if "
                    "not where the run's config says (real corpora only).")
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
flags.DEFINE_integer("cache_window", None, "Evaluate with a neural cache of this many previous "
                     "hidden states too (Grave et al. 2017); unset: no cache.")
flags.DEFINE_float("cache_theta", None, "Flatness theta >= 0 of the cache distribution "
                   "(default 0.3; not with --cache_grid).")
flags.DEFINE_float("cache_lambda", None, "Interpolation weight lambda in [0, 1) of the cache "
                   "(default 0.1; not with --cache_grid).")
flags.DEFINE_bool("cache_grid", False, "Choose theta and lambda by grid search on the valid "
                  "split (its first --max_tokens), then evaluate that pair on --split.")
flags.DEFINE_list("cache_thetas", None, "Thetas of --cache_grid (default: "
                  "0.1,0.2,0.3,0.5,0.7,1.0).")
flags.DEFINE_list("cache_lambdas", None, "Lambdas of --cache_grid (default: "
                  "0.05,0.1,0.15,0.2,0.3,0.4).")
flags.register_validator("workdir", bool, message="is required: a training run's folder.")
flags.register_validator("cache_window", lambda v: v is None or v >= 1,
                         message="must be an integer >= 1 (hidden states in the cache).")
flags.register_validator("cache_theta", lambda v: v is None or v >= 0, message="must be >= 0.")
flags.register_validator("cache_lambda", lambda v: v is None or 0 <= v < 1,
                         message="must be in [0, 1) (at 1 every word the cache does not "
                                 "hold gets probability 0).")
cli.define_version_flag(FLAGS)

PROGRAM = "psmm-evaluate"


def _main(argv):
    if len(argv) > 1:
        cli.usage_error(PROGRAM, f"Unexpected arguments: {' '.join(argv[1:])}")
    cli.require_tensorflow_backend(PROGRAM)
    # TensorFlow's own INFO lines (one per checkpoint shard) would drown the progress.
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    from psmm_tf.evaluation import evaluate_lib

    try:
        cache = evaluate_lib.cache_option(
            FLAGS.cache_window, [n for n in evaluate_lib.CACHE_OPTIONS if FLAGS[n].present],
            **{name: FLAGS[name].value for name in evaluate_lib.CACHE_OPTIONS})
        evaluate_lib.check_workdir(FLAGS.workdir)
        positions = evaluate_lib.positions_option(FLAGS.positions)
        lines = evaluate_lib.run_evaluation(
            FLAGS.workdir, positions=positions, cache=cache,
            **{name: FLAGS[name].value for name in evaluate_lib.REPORT_OPTIONS})
    except evaluate_lib.CommandError as err:
        sys.exit(f"FATAL {err}")
    print("\n".join(lines))


def main(argv=None):
    """Console-script entry point (`psmm-evaluate`)."""
    cli.run(_main, program=PROGRAM, doc=__doc__, module_name=__name__, argv=argv)


if __name__ == "__main__":
    main()
