r"""PSMM and its LSTM trained side by side, epoch by epoch, with per-epoch validation curves.

Each row is a normal, resumable psmm-train run under --output_dir/<row>/ (same preset, seed and
budget; the LSTM is the same backbone without the pointer). The rows advance one epoch at a
time in turn, so a run stopped at any point (a kill, the end of a session) has comparable
curves, and the same command resumes it where it stopped (psmm-train resumes a killed run
exactly). Rows:
  psmm, lstm       the preset as it is.
  lstm_standard    the LSTM under the standard medium regime (Zaremba et al. 2014: batch 20,
                   BPTT 35, clip 5, learning rate 1, weights uniform in [-0.05, 0.05]), the
                   comparison row for the preset's own regime (docs/design_notes.md).
  psmm_no_pointer_warmup
                   PSMM without the warm-up of the pointer's share (the paper's objective from
                   the first update).
  psmm_previous, lstm_previous
                   the medium preset's earlier regime and start (batch 32, BPTT 100, Keras'
                   initialisers, no warm-up), for the comparison in docs/experiments/2026-log.md.
  psmm_bf16, lstm_bf16
                   psmm and lstm under the mixed_bfloat16 policy (--mixed_precision).

Per epoch it reports each row's validation perplexity, its cumulative training seconds and the
worst training step after step 20 (the exp of steps.jsonl's per-target loss); at the end, the
pointer diagnostics of the PSMM run (results.json). Writes <output_dir>/side_by_side.json and
side_by_side.md.

Targets (issue "the paper's model as users run it"): PSMM <= LSTM after every epoch, PSMM/LSTM
<= 0.90 by epoch 6, no training step after step 20 with perplexity above V, and the LSTM's
curve at least as good as lstm_standard's per epoch and per hour.

With --report_only it trains nothing and reports on the run folders already under
--output_dir/<row>/, however they were trained: e.g. the two halves of `psmm-train
--preset=medium --dataset=ptb --compare_baseline --workdir=DIR` (DIR/psmm and DIR/lstm), each
to the preset's stopping rule, with their test perplexities once finished.

Usage:
  python benchmarks/side_by_side.py --preset=medium --dataset=ptb \
      --data_dir=/data/ptb --epochs=6 --output_dir=/tmp/psmm_medium_ptb
  python benchmarks/side_by_side.py --report_only --output_dir=/runs/ptb_medium
"""

import json
import math
import sys
from pathlib import Path

from absl import app, flags

from psmm_tf import configs
from psmm_tf import workdir as run_files
from psmm_tf.training import train_lib

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "/tmp/psmm_side_by_side", "Where the runs and the report go.")
flags.DEFINE_enum("preset", "medium", sorted(configs.PRESETS), "Model and training preset.")
flags.DEFINE_enum("dataset", "ptb", ["ptb", "wikitext2", "wikitext103", "text"], "Corpus.")
flags.DEFINE_string("data_dir", None, "Folder of the corpus files.")
flags.DEFINE_list("rows", ["psmm", "lstm"], "Rows, trained in this order each epoch: psmm, lstm, "
                  "lstm_standard, psmm_no_pointer_warmup, psmm_previous, lstm_previous, "
                  "psmm_bf16, lstm_bf16.")
flags.DEFINE_integer("epochs", 6, "Epochs of every row.", lower_bound=1)
flags.DEFINE_integer("seed", 0, "Seed shared by all rows.")
flags.DEFINE_integer("window_size", None, "The pointer's window L (default: the preset's).",
                     lower_bound=1)
flags.DEFINE_integer("steps_per_epoch", None, "Limit of steps per epoch (shortened runs).",
                     lower_bound=1)
flags.DEFINE_integer("max_eval_tokens", None, "Evaluate on at most this many tokens.",
                     lower_bound=1)
flags.DEFINE_bool("report_only", False, "Train nothing: report on the runs under "
                  "--output_dir/<row>/ (e.g. a psmm-train --compare_baseline workdir).")
flags.DEFINE_list("wikitext_splits", ["train", "valid", "test"], "train,valid,test roles of "
                  "WikiText's files (valid,test,test where wiki.train.tokens is absent).")

# Per row: (model kind, model-config fields and train-config fields replacing the preset's).
# The standard medium regime of Zaremba et al. (2014): batch 20, BPTT 35, clip 5, learning
# rate 1, weights uniform in [-0.05, 0.05], no warm-up.
STANDARD_MODEL = {"init_scale": 0.05}
STANDARD_TRAIN = {"batch_size": 20, "num_predicted": 35, "clip_norm": 5.0,
                  "learning_rate": 1.0, "warmup_steps": 0, "pointer_warmup_steps": 0}
# The presets' earlier start: Keras' initialisers, no warm-up; medium and large also trained
# batch 32 x BPTT 100 (small's batch 20 x BPTT 35 is unchanged).
PREVIOUS_MODEL = {"init_scale": None}
PREVIOUS_TRAIN = {"warmup_steps": 0, "pointer_warmup_steps": 0}
PREVIOUS_SHAPE = {"medium": {"batch_size": 32, "num_predicted": 100},
                  "large": {"batch_size": 32, "num_predicted": 100}}
ROWS = {
    "psmm": ("psmm", {}, {}),
    "lstm": ("lstm", {}, {}),
    "lstm_standard": ("lstm", STANDARD_MODEL, STANDARD_TRAIN),
    "psmm_no_pointer_warmup": ("psmm", {}, {"pointer_warmup_steps": 0}),
    "psmm_previous": ("psmm", PREVIOUS_MODEL, PREVIOUS_TRAIN),
    "lstm_previous": ("lstm", PREVIOUS_MODEL, PREVIOUS_TRAIN),
    "psmm_bf16": ("psmm", {}, {"mixed_precision": "mixed_bfloat16"}),
    "lstm_bf16": ("lstm", {}, {"mixed_precision": "mixed_bfloat16"}),
}
# Training steps this early are allowed above the vocabulary size (the targets' "first few").
EARLY_STEPS = 20


def row_config(row, max_epochs):
    """The `ExperimentConfig` of `row`, trained for `max_epochs` with the fixed budget."""
    kind, model, train = ROWS[row]
    if row.endswith("_previous"):
        train = {**train, **PREVIOUS_SHAPE.get(FLAGS.preset, {})}
    base = configs.get_preset(FLAGS.preset)
    model = {"kind": kind, **model}
    if FLAGS.window_size:
        model["window_size"] = FLAGS.window_size
    data = {"dataset": FLAGS.dataset, "data_dir": FLAGS.data_dir}
    if FLAGS.dataset.startswith("wikitext"):
        data.update(zip(("train_split", "valid_split", "test_split"), FLAGS.wikitext_splits))
    # A fixed budget: the paper's patience would stop the rows at different epochs.
    train = {"seed": FLAGS.seed, "max_epochs": max_epochs, "patience": 1000,
             "steps_per_epoch": FLAGS.steps_per_epoch, "max_eval_tokens": FLAGS.max_eval_tokens,
             **train}
    return base.replace(model=model, train=train, data=data)


def worst_step_after(workdir, early_steps):
    """The largest per-step training perplexity after the first `early_steps` global steps."""
    worst = 0.0
    path = Path(workdir) / run_files.STEPS_FILE
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record["global_step"] > early_steps:
            worst = max(worst, math.exp(min(record["loss"], 700.0)))
    return worst


def row_curve(workdir):
    """[{epoch, valid_perplexity, train_seconds (cumulative), learning_rate}] of a run."""
    seconds, curve = 0.0, []
    for record in run_files.read_history(workdir):
        seconds += record["train_seconds"]
        curve.append({"epoch": record["epoch"] + 1, "valid_perplexity":
                      record["valid_perplexity"], "train_seconds": seconds,
                      "learning_rate": record["learning_rate"]})
    return curve


def report(out, vocab_size):
    """The per-epoch table and the targets, from the rows' run folders."""
    rows = {row: {"curve": row_curve(out / row),
                  "worst_step_after_20": worst_step_after(out / row, EARLY_STEPS)}
            for row in FLAGS.rows}
    for row in rows:
        results_path = out / row / run_files.RESULTS_FILE
        if results_path.is_file():
            rows[row]["results"] = json.loads(results_path.read_text())
    result = {"command": " ".join(["python benchmarks/side_by_side.py"] + sys.argv[1:]),
              "vocab_size": vocab_size, "rows": rows}
    if "psmm" in rows and "lstm" in rows:
        pairs = list(zip(rows["psmm"]["curve"], rows["lstm"]["curve"]))
        result["ratios"] = [p["valid_perplexity"] / q["valid_perplexity"] for p, q in pairs]
        result["psmm_never_behind"] = all(r <= 1.0 for r in result["ratios"])
    result["no_step_above_vocab_after_20"] = all(
        r["worst_step_after_20"] <= vocab_size for r in rows.values())
    return result


def markdown(result):
    rows = result["rows"]
    names = list(rows)
    epochs = max(len(r["curve"]) for r in rows.values())
    lines = [f"Command: `{result['command']}`", "",
             "| epoch | " + " | ".join(f"{n} valid ppl (train s)" for n in names)
             + (" | PSMM / LSTM |" if "ratios" in result else " |"),
             "|---:|" + "---:|" * len(names) + ("---:|" if "ratios" in result else "")]
    for e in range(epochs):
        cells = []
        for n in names:
            curve = rows[n]["curve"]
            cells.append(f"{curve[e]['valid_perplexity']:.2f} ({curve[e]['train_seconds']:.0f})"
                         if e < len(curve) else "-")
        ratio = result.get("ratios", [])
        tail = f" | {ratio[e]:.3f} |" if e < len(ratio) else (" | - |" if ratio else " |")
        lines.append(f"| {e + 1} | " + " | ".join(cells) + tail)
    lines += ["", "Worst training step after step 20 (perplexity; V = "
              f"{result['vocab_size']}): " + ", ".join(
                  f"{n} {r['worst_step_after_20']:.0f}" for n, r in rows.items())]
    if "psmm_never_behind" in result:
        lines.append(f"PSMM <= LSTM after every epoch: {result['psmm_never_behind']}")
    for n, r in rows.items():
        learning_rates = [point["learning_rate"] for point in r["curve"]]
        halvings = [point["epoch"] for previous, point in zip(r["curve"], r["curve"][1:])
                    if point["learning_rate"] < previous["learning_rate"]]
        if learning_rates:
            lines.append(f"{n}: epoch {len(learning_rates)} trained at learning rate "
                         f"{learning_rates[-1]:g}, the rate lowered after epochs "
                         f"{[e - 1 for e in halvings] or 'none'}")
        finished = r.get("results", {})
        if "test_perplexity" in finished:
            valid = train_lib.model_valid_perplexity(finished)
            lines.append(f"{n} finished: {finished['epochs']} epochs, valid {valid:.2f}, "
                         f"test {finished['test_perplexity']:.2f}, "
                         f"{finished['train_seconds'] / 3600:.1f} h of training")
    pointer = rows.get("psmm", {}).get("results", {}).get("pointer")
    if pointer:
        lines.append(f"PSMM pointer (valid): gate {pointer['gate_target_in_window']:.3f} when the "
                     f"target is in the window, {pointer['gate_target_not_in_window']:.3f} when "
                     f"not; query kernel moved "
                     f"{pointer['weights']['query_kernel'].get('relative_change', math.nan):.0%}")
    return "\n".join(lines) + "\n"


def main(argv):
    del argv
    unknown = [r for r in FLAGS.rows if r not in ROWS]
    if unknown:
        raise app.UsageError(f"--rows: unknown {unknown}; expected some of {sorted(ROWS)}.")
    out = Path(FLAGS.output_dir)
    if FLAGS.report_only:
        missing = [row for row in FLAGS.rows if not (out / row / run_files.CONFIG_FILE).is_file()]
        if missing:
            raise app.UsageError(f"--report_only: no run folder for {missing} under {out} "
                                 f"(expected {out}/<row>/{run_files.CONFIG_FILE}).")
        result = report(out, run_files.load_config(out / FLAGS.rows[0]).model.vocab_size)
        print(markdown(result))
        return
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = None
    for epoch in range(1, FLAGS.epochs + 1):
        for row in FLAGS.rows:
            workdir = out / row
            last = epoch == FLAGS.epochs
            if len(run_files.read_history(workdir)) >= epoch and not (
                    last and not (workdir / run_files.RESULTS_FILE).is_file()):
                continue  # done in an earlier invocation
            # Test perplexity, pointer diagnostics and the gate's calibration once, at the end.
            train_lib.run(row_config(row, epoch), workdir, verbose=0,
                          finish=last)
            vocab_size = run_files.load_config(workdir).model.vocab_size
            result = report(out, vocab_size)
            (out / "side_by_side.json").write_text(json.dumps(result, indent=2))
            (out / "side_by_side.md").write_text(markdown(result))
            print(f"epoch {epoch} {row}: {row_curve(workdir)[-1]}", flush=True)
    vocab_size = vocab_size or run_files.load_config(out / FLAGS.rows[0]).model.vocab_size
    result = report(out, vocab_size)
    (out / "side_by_side.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    app.run(main)
