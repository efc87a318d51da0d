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

from psmm_tf import cli

FLAGS = flags.FLAGS

flags.DEFINE_string("workdir", None, "The training run to evaluate.")
flags.DEFINE_string("baseline_workdir", None, "A run of the comparison model (e.g. the LSTM) "
                    "with the same vocabulary, for the word-frequency analysis.")
flags.DEFINE_enum("split", "test", ["train", "valid", "test"], "Split (role) to evaluate.")
flags.DEFINE_string("output_dir", None, "Where the report goes (default: "
                    "<workdir>/evaluation_<split>).")
flags.DEFINE_enum("model_source", "best", ["best", "latest"], "The run's model to evaluate: "
                  "best (model.keras, the best by validation perplexity) or latest (the newest "
                  "checkpoint); the output names it.")
flags.DEFINE_string("data_dir", None, "Where the corpus files are, if they moved since "
                    "training (real corpora only; read, never written).")
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
flags.DEFINE_float("cache_lambda", None, "Interpolation weight lambda in [0, 1] of the cache "
                   "(default 0.1; not with --cache_grid).")
flags.DEFINE_bool("cache_grid", False, "Choose theta and lambda by grid search on the valid "
                  "split (its first --max_tokens), then evaluate that pair on --split.")
flags.DEFINE_list("cache_thetas", None, "Thetas of --cache_grid (default: "
                  "0.1,0.2,0.3,0.5,0.7,1.0).")
flags.DEFINE_list("cache_lambdas", None, "Lambdas of --cache_grid (default: "
                  "0.05,0.1,0.15,0.2,0.3,0.4).")
flags.register_validator("workdir", bool, message="is required: a training run's folder.")
cli.define_version_flag(FLAGS)

PROGRAM = "psmm-evaluate"
flags.register_validator("cache_window", lambda v: v is None or v >= 1,
                         message="must be an integer >= 1 (hidden states in the cache).")
flags.register_validator("cache_theta", lambda v: v is None or v >= 0, message="must be >= 0.")
flags.register_validator("cache_lambda", lambda v: v is None or 0 <= v <= 1,
                         message="must be in [0, 1].")


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


def _floats(name, check, expected):
    """The floats of list flag --`name`, each passing `check`, else exit naming the flag."""
    values = getattr(FLAGS, name)
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        numbers = None
    if not numbers or not all(check(x) for x in numbers):
        sys.exit(f"FATAL Flags error: --{name} must be a comma-separated list of {expected}, "
                 f"got {','.join(values)!r}.")
    return tuple(numbers)


def _cache_options():
    """The neural cache flags as keyword arguments of `CacheSettings` (None: no cache)."""
    cache_flags = ("cache_theta", "cache_lambda", "cache_grid", "cache_thetas", "cache_lambdas")
    if FLAGS.cache_window is None:
        given = [f"--{name}" for name in cache_flags if FLAGS[name].present]
        if given:
            sys.exit(f"FATAL Flags error: {', '.join(given)} given without --cache_window "
                     "(the number of hidden states in the cache).")
        return None
    options = {"window": FLAGS.cache_window, "search": FLAGS.cache_grid}
    if FLAGS.cache_grid:
        given = [f"--{n}" for n in ("cache_theta", "cache_lambda") if FLAGS[n].present]
        if given:
            sys.exit(f"FATAL Flags error: {', '.join(given)} cannot be combined with "
                     "--cache_grid, which chooses them; give --cache_thetas/--cache_lambdas.")
        if FLAGS.cache_thetas is not None:
            options["thetas"] = _floats("cache_thetas", lambda x: x >= 0, "thetas >= 0")
        if FLAGS.cache_lambdas is not None:
            options["lambdas"] = _floats("cache_lambdas", lambda x: 0 <= x <= 1,
                                         "lambdas in [0, 1]")
    else:
        given = [f"--{n}" for n in ("cache_thetas", "cache_lambdas") if FLAGS[n].present]
        if given:
            sys.exit(f"FATAL Flags error: {', '.join(given)} given without --cache_grid.")
        if FLAGS.cache_theta is not None:
            options["theta"] = FLAGS.cache_theta
        if FLAGS.cache_lambda is not None:
            options["lam"] = FLAGS.cache_lambda
    return options


def _main(argv):
    if len(argv) > 1:
        cli.usage_error(PROGRAM, f"Unexpected arguments: {' '.join(argv[1:])}")
    # TensorFlow's own INFO lines (one per checkpoint shard) would drown the progress.
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    from pathlib import Path

    from psmm_tf import workdir as run_files

    cache_options = _cache_options()
    workdir = Path(FLAGS.workdir)
    for needed in (run_files.CONFIG_FILE, run_files.VOCAB_FILE):
        if not (workdir / needed).is_file():
            sys.exit(f"FATAL Flags error: --workdir={workdir} has no {needed}; expected the "
                     "folder of a training run.")
    positions = _positions()
    from psmm_tf.evaluation import analysis, neural_cache, report, trained_run

    if FLAGS.baseline_workdir is not None:
        try:  # before any work: the comparison ends with the Figure 4 chart
            analysis.require_matplotlib()
        except ImportError as err:
            sys.exit(f"FATAL --baseline_workdir: {err}")

    cache = None if cache_options is None else neural_cache.CacheSettings(**cache_options)
    output_dir = FLAGS.output_dir or run_files.evaluation_dir(workdir, FLAGS.split)
    try:
        metrics = report.evaluation_report(
            workdir, output_dir, split=FLAGS.split, baseline_workdir=FLAGS.baseline_workdir,
            data_dir=FLAGS.data_dir, max_tokens=FLAGS.max_tokens, batch_size=FLAGS.batch_size,
            length=FLAGS.length, num_buckets=FLAGS.num_buckets, bucket_by=FLAGS.bucket_by,
            positions=positions, num_examples=FLAGS.num_examples, cache=cache,
            model_source=FLAGS.model_source)
    except trained_run.RunLoadError as err:
        sys.exit(f"FATAL {err}")  # names the file, split or --data_dir; nothing written
    print(f"model: {run_files.describe_model_source(FLAGS.model_source, metrics['model_path'])}")
    print(f"{metrics['model']} {FLAGS.split} perplexity {metrics['perplexity']:.2f} "
          f"({metrics['num_targets']} targets), mean gate {metrics['gate']['mean']:.3f}")
    if "pointer" in metrics:
        from psmm_tf.evaluation import pointer_diagnostics

        print("pointer diagnostics:")
        for line in pointer_diagnostics.format_pointer_diagnostics(metrics["pointer"]):
            print(f"  {line}")
    if "baseline_perplexity" in metrics:
        print(f"baseline {FLAGS.split} perplexity {metrics['baseline_perplexity']:.2f}; ratio "
              f"{metrics['perplexity'] / metrics['baseline_perplexity']:.3f}")
        print((Path(output_dir) / "frequency_buckets.md").read_text())
    if "neural_cache" in metrics:
        print(neural_cache.format_cache_metrics(metrics["neural_cache"]))
    print(f"report written to {output_dir}")


def main(argv=None):
    """Console-script entry point (`psmm-evaluate`)."""
    cli.run(_main, program=PROGRAM, doc=__doc__, module_name=__name__, argv=argv)


if __name__ == "__main__":
    main()
