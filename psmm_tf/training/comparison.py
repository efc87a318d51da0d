"""A model against the LSTM baseline with the same backbone, data and budget."""

import dataclasses
from pathlib import Path

from psmm_tf.models.registry import BASELINE_KIND
from psmm_tf.training import run_setup, train_lib


def compare_with_baseline(config, workdir, strategy=None, verbose=1, restart=False):
    """Trains `config`'s model in `workdir/<kind>` and the LSTM baseline in `workdir/lstm`.

    Both runs share every setting but the model kind (same seed, data, schedule and steps), and
    resume like any run.

    Args:
        config: `ExperimentConfig`; its model kind is the one compared (default "psmm").
        workdir: str or path. Parent folder of the two runs.
        strategy: optional `tf.distribute.Strategy`.
        verbose, restart: as for `train_lib.run` (both runs).

    Returns:
        dict kind -> the results dict of `train_lib.run` (model first, then "lstm").

    Raises:
        run_setup.RunRefusedError: as `train_lib.run`; `workdir` itself holds a run (a single
            run's config.json or outputs, or a character-output run), before anything is
            written.
    """
    workdir = Path(workdir)
    kinds = [config.model.kind] + ([BASELINE_KIND] if config.model.kind != BASELINE_KIND else [])
    # A single run's folder is refused before either run starts inside it.
    run_setup.check_workdir_holds(workdir, "comparison", kinds)
    results = {}
    for kind in kinds:
        run_config = dataclasses.replace(config, model=dataclasses.replace(config.model,
                                                                           kind=kind))
        results[kind] = train_lib.run(run_config, workdir / kind, strategy=strategy,
                                      verbose=verbose, restart=restart)
    return results


def format_comparison(results):
    """A plain-text table of `compare_with_baseline`'s results and the perplexity ratios."""
    lines = [f"{'model':<16}{'valid ppl':>12}{'test ppl':>12}{'epochs':>8}{'train s':>10}"]
    for kind, r in results.items():
        if not r:
            continue
        test = r.get("test_perplexity", float("nan"))
        lines.append(f"{kind:<16}{train_lib.model_valid_perplexity(r):>12.2f}{test:>12.2f}"
                     f"{r['epochs']:>8d}{r['train_seconds']:>10.1f}")
    base = results.get(BASELINE_KIND)
    for kind, r in results.items():
        if kind == BASELINE_KIND or not r or not base:
            continue
        ratio = train_lib.model_valid_perplexity(r) / train_lib.model_valid_perplexity(base)
        line = f"{kind} / {BASELINE_KIND}: valid perplexity ratio {ratio:.3f}"
        if "test_perplexity" in r and "test_perplexity" in base:
            line += f", test perplexity ratio {r['test_perplexity'] / base['test_perplexity']:.3f}"
        lines.append(line)
    for kind, r in results.items():
        if r and "pointer" in r:
            p = r["pointer"]
            moved = p["weights"]["query_kernel"].get("relative_change")
            lines.append(
                f"{kind} pointer (valid): gate {p['gate_target_in_window']:.3f} when the target "
                f"is in the window, {p['gate_target_not_in_window']:.3f} when not; precision "
                f"{p['pointer_precision_in_window']:.3f}; query constancy "
                f"{p['query_constancy']:.2f}"
                + (f"; query kernel moved {moved:.0%} from its initial value"
                   if moved is not None else ""))
        if r and "gate_calibration" in r:
            scale, bias = r["gate_calibration"]["gate_calibration"]
            lines.append(f"{kind} gate calibrated on valid: logit x {scale:.2f} {bias:+.2f} "
                         f"(valid {r['best_valid_perplexity']:.2f} with the trained gate)")
    return "\n".join(lines)
