r"""PSMM and its LSTM over seeds: each seed's comparison run and the range over finished seeds.

Reads comparison folders (each holding `psmm/` and `lstm/`, e.g. `psmm-train --compare_baseline
--workdir=DIR --seed=S`, or its two halves run at once) and prints one markdown row per seed: the
best validation perplexity of each model (PSMM's with its gate as trained and as calibrated), their
test perplexities (PSMM's with its gate as trained, the paper's model, and with the calibrated gate
of its model.keras), PSMM / LSTM on test, epochs and training hours. PSMM's trained-gate test
perplexity is results.json's `trained_gate_test_perplexity`, or where a run's results.json lacks it
the report of `psmm-evaluate --workdir=DIR/psmm --trained_gate --split=test
--output_dir=DIR/trained_gate_psmm`. A run still training shows its best validation so far and its
epochs so far. Where two or more seeds have both runs finished, the last rows give each column's
range (min-max) and mean over them. It trains and evaluates nothing.

Usage:
  python benchmarks/seed_range.py --runs=/runs/ptb_medium,/runs/ptb_medium_seed1
"""

import json
import math
from pathlib import Path

from absl import app, flags

from psmm_tf import workdir as run_files

FLAGS = flags.FLAGS
flags.DEFINE_list("runs", None, "Comparison folders, each holding psmm/ and lstm/ run folders.")

MODELS = ("psmm", "lstm")
# (header, function of the seed's {model: run summary}); None where a value is not known yet.
COLUMNS = (
    ("PSMM valid (trained gate)", lambda s: s["psmm"]["best_valid"]),
    ("PSMM valid (calibrated)", lambda s: s["psmm"].get("calibrated_valid")),
    ("PSMM test (trained gate)", lambda s: s["psmm"].get("trained_gate_test")),
    ("PSMM test (calibrated)", lambda s: s["psmm"].get("test")),
    ("LSTM valid", lambda s: s["lstm"]["best_valid"]),
    ("LSTM test", lambda s: s["lstm"].get("test")),
    ("PSMM (trained gate) / LSTM test",
     lambda s: (s["psmm"]["trained_gate_test"] / s["lstm"]["test"]
                if "trained_gate_test" in s["psmm"] and "test" in s["lstm"] else None)),
    ("PSMM (calibrated) / LSTM test", lambda s: (s["psmm"]["test"] / s["lstm"]["test"]
                                    if "test" in s["psmm"] and "test" in s["lstm"] else None)),
)


def run_summary(run_dir):
    """{seed, epochs, best_valid, hours, finished[, calibrated_valid, test, trained_gate_test]}
    of one run folder."""
    config = run_files.load_config(run_dir)
    history = run_files.read_history(run_dir)
    if not history:
        raise ValueError(f"{run_dir}: no epoch finished yet ({run_files.HISTORY_FILE} is empty).")
    summary = {"seed": config.train.seed, "epochs": len(history),
               "best_valid": min(record["valid_perplexity"] for record in history),
               "hours": sum(record["train_seconds"] for record in history) / 3600,
               "finished": False}
    results_path = Path(run_dir) / run_files.RESULTS_FILE
    if results_path.is_file():
        results = json.loads(results_path.read_text())
        summary.update(finished=True, best_valid=results["best_valid_perplexity"],
                       test=results["test_perplexity"], epochs=results["epochs"],
                       hours=results["train_seconds"] / 3600)
        if "calibrated_valid_perplexity" in results:
            summary["calibrated_valid"] = results["calibrated_valid_perplexity"]
        trained_gate = _trained_gate_test(run_dir, results)
        if trained_gate is not None:
            summary["trained_gate_test"] = trained_gate
    return summary


def _trained_gate_test(run_dir, results):
    """PSMM's test perplexity with its gate as trained (see the module docstring), or None."""
    if "trained_gate_test_perplexity" in results:
        return results["trained_gate_test_perplexity"]
    report = Path(run_dir).parent / "trained_gate_psmm" / "metrics.json"
    if Path(run_dir).name != "psmm" or not report.is_file():
        return None
    metrics = json.loads(report.read_text())
    if (metrics.get("split"), metrics.get("gate_calibration"), metrics.get("model_source")) != (
            "test", None, "best"):
        raise ValueError(f"{report} is not PSMM's test report of its best model with its gate "
                         f"as trained (split {metrics.get('split')!r}, gate_calibration "
                         f"{metrics.get('gate_calibration')!r}, model_source "
                         f"{metrics.get('model_source')!r}).")
    return metrics["perplexity"]


def seed_summary(comparison_dir):
    """{model: run_summary} of a comparison folder; both runs must share their seed."""
    missing = [m for m in MODELS
               if not (Path(comparison_dir) / m / run_files.CONFIG_FILE).is_file()]
    if missing:
        raise ValueError(f"--runs: {comparison_dir} has no run folder for {missing} (expected "
                         f"{comparison_dir}/<psmm|lstm>/{run_files.CONFIG_FILE}).")
    summary = {m: run_summary(Path(comparison_dir) / m) for m in MODELS}
    seeds = {summary[m]["seed"] for m in MODELS}
    if len(seeds) != 1:
        raise ValueError(f"--runs: {comparison_dir}: psmm and lstm were trained with different "
                         f"seeds {sorted(seeds)}.")
    return summary


def _cell(value):
    if value is None:
        return ""
    return f"{value:.3f}" if value < 10 else f"{value:.2f}"


def markdown(summaries):
    """The per-seed table and, over the finished seeds, the range and mean of each column."""
    headers = ["seed"] + [h for h, _ in COLUMNS] + ["epochs (PSMM / LSTM)",
                                                    "train hours (PSMM / LSTM)", "state"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---:|" * (len(headers) - 1) + "---|"]
    finished = []
    for summary in summaries:
        done = all(summary[m]["finished"] for m in MODELS)
        if done:
            finished.append(summary)
        cells = [str(summary["psmm"]["seed"])] + [_cell(f(summary)) for _, f in COLUMNS]
        cells += [" / ".join(str(summary[m]["epochs"]) for m in MODELS),
                  " / ".join(f"{summary[m]['hours']:.1f}" for m in MODELS),
                  "finished" if done else "training (best so far)"]
        lines.append("| " + " | ".join(cells) + " |")
    if len(finished) > 1:
        for label, reduce in (("min-max", lambda v: f"{_cell(min(v))}-{_cell(max(v))}"),
                              ("mean", lambda v: _cell(math.fsum(v) / len(v)))):
            cells = [f"{label} ({len(finished)} seeds)"]
            for _, f in COLUMNS:
                values = [f(s) for s in finished]
                cells.append(reduce(values) if None not in values else "")
            lines.append("| " + " | ".join(cells + ["", "", ""]) + " |")
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    if not FLAGS.runs:
        raise app.UsageError("--runs: expected comparison folders (each with psmm/ and lstm/), "
                             "comma-separated.")
    try:
        summaries = [seed_summary(path) for path in FLAGS.runs]
    except ValueError as error:
        raise app.UsageError(str(error)) from error
    folders = {}
    for path, summary in zip(FLAGS.runs, summaries):
        seed = summary["psmm"]["seed"]
        if seed in folders:
            raise app.UsageError(f"--runs: seed {seed} in both {folders[seed]} and {path}; "
                                 "expected one comparison folder per seed.")
        folders[seed] = path
    print(markdown(summaries))


if __name__ == "__main__":
    app.run(main)
