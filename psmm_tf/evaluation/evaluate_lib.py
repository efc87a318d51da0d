"""psmm-evaluate's library: its options checked, a run's report written, the summary printed.

`trainers/evaluate.py` maps its flags onto these functions (the option names are the flags'
names) and prints `CommandError`s as `FATAL <message>`; everything else lives here, importable
without absl.
"""

from pathlib import Path

from psmm_tf import workdir as run_files
from psmm_tf.evaluation import analysis, pointer_diagnostics, report
from psmm_tf.evaluation.neural_cache import (
    CacheSettings,
    check_cache_settings,
    format_cache_metrics,
)
from psmm_tf.evaluation.trained_run import RunLoadError

# psmm-evaluate's neural cache options besides --cache_window, in the order errors name them.
CACHE_OPTIONS = ("cache_theta", "cache_lambda", "cache_grid", "cache_thetas", "cache_lambdas")
# Its options that go to `run_evaluation` as they are.
REPORT_OPTIONS = ("split", "output_dir", "model_source", "baseline_workdir", "data_dir",
                  "tfds_data_dir", "max_tokens", "batch_size", "length", "num_buckets", "bucket_by",
                  "num_examples", "mixed_precision", "trained_gate")


class CommandError(ValueError):
    """psmm-evaluate refuses its command line or the run; the message follows `FATAL `."""


def _flags_error(message):
    return CommandError(f"Flags error: {message}")


def positions_option(values):
    """The target indices of --positions (a list of strings), or None when not given."""
    if values is None:
        return None
    try:
        positions = [int(p) for p in values]
    except ValueError:
        raise _flags_error("--positions must be a comma-separated list of integers, got "
                           f"{','.join(values)!r}.") from None
    if any(p < 0 for p in positions):
        raise _flags_error("--positions must be target indices >= 0.")
    return positions


def _floats(name, values, check, expected):
    """The floats of list option --`name`, each passing `check`, else a `CommandError`."""
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        numbers = None
    if not numbers or not all(check(x) for x in numbers):
        raise _flags_error(f"--{name} must be a comma-separated list of {expected}, got "
                           f"{','.join(values)!r}.")
    return tuple(numbers)


def cache_option(cache_window, given=(), cache_theta=None, cache_lambda=None, cache_grid=False,
                 cache_thetas=None, cache_lambdas=None):
    """The `CacheSettings` of the --cache_* options, or None without --cache_window.

    `given` names the `CACHE_OPTIONS` present on the command line (a default is not given).
    """
    if cache_window is None:
        named = [f"--{name}" for name in CACHE_OPTIONS if name in given]
        if named:
            raise _flags_error(f"{', '.join(named)} given without --cache_window (the number "
                               "of hidden states in the cache).")
        return None
    options = {"window": cache_window, "search": cache_grid}
    if cache_grid:
        named = [f"--{n}" for n in ("cache_theta", "cache_lambda") if n in given]
        if named:
            raise _flags_error(f"{', '.join(named)} cannot be combined with --cache_grid, "
                               "which chooses them; give --cache_thetas/--cache_lambdas.")
        if cache_thetas is not None:
            options["thetas"] = _floats("cache_thetas", cache_thetas, lambda x: x >= 0,
                                        "thetas >= 0")
        if cache_lambdas is not None:
            options["lambdas"] = _floats("cache_lambdas", cache_lambdas, lambda x: 0 <= x < 1,
                                         "lambdas in [0, 1)")
        names = ("--cache_window", "--cache_thetas", "--cache_lambdas")
        thetas, lambdas = options.get("thetas", ()), options.get("lambdas", ())
    else:
        named = [f"--{n}" for n in ("cache_thetas", "cache_lambdas") if n in given]
        if named:
            raise _flags_error(f"{', '.join(named)} given without --cache_grid.")
        if cache_theta is not None:
            options["theta"] = cache_theta
        if cache_lambda is not None:
            options["lam"] = cache_lambda
        names = ("--cache_window", "--cache_theta", "--cache_lambda")
        thetas = () if cache_theta is None else (cache_theta,)
        lambdas = () if cache_lambda is None else (cache_lambda,)
    try:
        # The values given, named as their flags (e.g. an infinite theta, which the flags' own
        # checks let by); CacheSettings checks them again.
        check_cache_settings(cache_window, thetas, lambdas, names=names)
        return CacheSettings(**options)
    except ValueError as err:
        raise _flags_error(str(err)) from None


def check_workdir(workdir):
    """Raises a `CommandError` unless `workdir` holds a training run's config and vocabulary."""
    workdir = Path(workdir)
    wrong = run_files.misplaced_entries(workdir)
    for needed in (run_files.CONFIG_FILE, run_files.VOCAB_FILE):
        if needed in wrong:
            raise _flags_error(f"--workdir={workdir}: {wrong[needed]}.")
        if not (workdir / needed).is_file():
            raise _flags_error(f"--workdir={workdir} has no {needed}; expected the folder of a "
                               "training run.")


def run_evaluation(workdir, *, split="test", output_dir=None, model_source="best",
                   baseline_workdir=None, positions=None, cache=None, **options):
    """Writes the report of the run in `workdir` (`report.evaluation_report`); returns its lines.

    Args:
        workdir: the run. output_dir: where the report goes (default
            `<workdir>/evaluation_<split>`). positions: `positions_option`'s list or None.
        cache: `cache_option`'s `CacheSettings` or None.
        split, model_source, baseline_workdir, **options: `report.evaluation_report`'s
            (`REPORT_OPTIONS`).

    Returns:
        The lines psmm-evaluate prints: the model read, the perplexity and mean gate, the
        pointer diagnostics, the baseline's table and the cache's scores where there are.

    Raises:
        CommandError: the baseline comparison without matplotlib (before any work), or a run,
            split, position or output folder that cannot be evaluated (nothing written).
    """
    if baseline_workdir is not None:
        try:  # before any work: the comparison ends with the Figure 4 chart
            analysis.require_matplotlib()
        except ImportError as err:
            raise CommandError(f"--baseline_workdir: {err}") from None
    workdir = Path(workdir)
    try:  # read by the report after the evaluation pass: checked before it
        pointer_diagnostics.load_initial_pointer_weights(
            workdir / run_files.INITIAL_POINTER_FILE)
    except ValueError as err:
        raise CommandError(str(err)) from None
    output_dir = output_dir or run_files.evaluation_dir(workdir, split)
    try:
        metrics = report.evaluation_report(
            workdir, output_dir, split=split, baseline_workdir=baseline_workdir,
            positions=positions, cache=cache, model_source=model_source, **options)
    except RunLoadError as err:
        raise CommandError(str(err)) from None  # names the file, split or --data_dir
    return summary_lines(metrics, split, output_dir, model_source)


def summary_lines(metrics, split, output_dir, model_source="best"):
    """psmm-evaluate's printed summary of `metrics` (`report.evaluation_report`'s dict)."""
    lines = [f"model: {run_files.describe_model_source(model_source, metrics['model_path'])}",
             f"{metrics['model']} {split} perplexity {metrics['perplexity']:.2f} "
             f"({metrics['num_targets']} targets), mean gate {metrics['gate']['mean']:.3f}"]
    if "gate_calibration" in metrics:
        calibration = metrics["gate_calibration"]
        lines.append("gate: as trained" if calibration is None else
                     f"gate: calibrated, logit x {calibration[0]:.3f} {calibration[1]:+.3f} "
                     "(fitted on the validation split after training)")
    if "pointer" in metrics:
        lines.append("pointer diagnostics:")
        lines += [f"  {line}" for line in
                  pointer_diagnostics.format_pointer_diagnostics(metrics["pointer"])]
    if "baseline_perplexity" in metrics:
        lines.append(f"baseline {split} perplexity {metrics['baseline_perplexity']:.2f}; ratio "
                     f"{metrics['perplexity'] / metrics['baseline_perplexity']:.3f}")
        lines.append((Path(output_dir) / "frequency_buckets.md").read_text())
    if "neural_cache" in metrics:
        lines.append(format_cache_metrics(metrics["neural_cache"]))
    lines.append(f"report written to {output_dir}")
    return lines
