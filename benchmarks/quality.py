r"""Quality benchmark: PSMM against the LSTM baseline, and the two pointer-memory modes.

Suites (each run is a normal, resumable training run under --output_dir):
  ptb        PSMM and LSTM, `small` preset (2x200, window 50, BPTT 35, batch 20), same seed,
             backbone and epochs, on Penn Treebank. Target (paper ratio): PSMM / LSTM valid
             perplexity <= 0.90.
  wikitext   The same pair on the WikiText-2 files of shared/data: trained on wiki.valid.tokens
             (vocabulary: every word of it, count >= 1), validated and tested on
             wiki.test.tokens (the schedule sees it: there is no third file). Target <= 0.80.
  memory     PSMM with pointer_memory=recompute (windows of C = L - 1 = 49 context + T = 35
             tokens) against "cache" (the wikitext suite's PSMM run): validation perplexity
             against training seconds, epoch by epoch.

Writes <output_dir>/quality.json and <output_dir>/quality.md (tables and the command).

Usage:
  python benchmarks/quality.py --output_dir=/tmp/psmm_quality --suites=ptb,wikitext,memory \
      --ptb_epochs=6 --wikitext_epochs=8
"""

import json
import os
import sys
import time
from pathlib import Path

from absl import app, flags

from psmm_tf import configs
from psmm_tf.training import comparison, reporting, train_lib

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "/tmp/psmm_quality", "Where the runs and the report go.")
flags.DEFINE_string("shared_data", None, "Folder with ptb/ and wikitext-2/ (default: "
                    "$PSMM_SHARED_DATA, else the shared/data sibling of the repository).")
flags.DEFINE_list("suites", ["ptb", "wikitext", "memory"], "Suites to run, in order.")
flags.DEFINE_integer("ptb_epochs", 6, "Epochs of each PTB run.", lower_bound=1)
flags.DEFINE_integer("wikitext_epochs", 8, "Epochs of each WikiText run.", lower_bound=1)
flags.DEFINE_integer("steps_per_epoch", None, "Limit of steps per epoch (shortened runs).",
                     lower_bound=1)
flags.DEFINE_enum("preset", "small", sorted(configs.PRESETS), "Model and training preset.")
flags.DEFINE_integer("seed", 0, "Seed shared by all runs.")

TARGETS = {"ptb": 0.90, "wikitext": 0.80}


def _shared_data():
    if FLAGS.shared_data:
        return Path(FLAGS.shared_data)
    default = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return Path(os.environ.get("PSMM_SHARED_DATA", default))


def _config(suite, data):
    base = configs.get_preset(FLAGS.preset)
    train = {"seed": FLAGS.seed, "steps_per_epoch": FLAGS.steps_per_epoch,
             "max_epochs": FLAGS.ptb_epochs if suite == "ptb" else FLAGS.wikitext_epochs,
             # A fixed budget: the paper's patience would stop runs at different epochs.
             "patience": 1000}
    if suite == "ptb":
        return base.replace(train=train, data={"dataset": "ptb", "data_dir": str(data / "ptb")})
    return base.replace(train=train, data={
        "dataset": "wikitext2", "data_dir": str(data / "wikitext-2"), "train_split": "valid",
        "valid_split": "test", "test_split": "test", "min_count": 1})


def _pair(suite, data, out):
    results = comparison.compare_with_baseline(_config(suite, data), out / suite, verbose=0)
    ratio = results["psmm"]["best_valid_perplexity"] / results["lstm"]["best_valid_perplexity"]
    return {"results": results, "valid_ratio": ratio, "target": TARGETS[suite],
            "meets_target": ratio <= TARGETS[suite],
            "table": comparison.format_comparison(results)}


def _memory(data, out):
    curves = {}
    for mode in ("cache", "recompute"):
        workdir = out / "wikitext" / "psmm" if mode == "cache" else out / "memory_recompute"
        config = _config("wikitext", data).replace(train={"pointer_memory": mode})
        results = train_lib.run(config, workdir, verbose=0)
        seconds, curve = 0.0, []
        for record in reporting.read_history(workdir):
            seconds += record["train_seconds"]
            curve.append({"epoch": record["epoch"] + 1, "train_seconds": seconds,
                          "valid_perplexity": record["valid_perplexity"],
                          "tokens_per_second": record["tokens_per_second"]})
        curves[mode] = {"results": results, "curve": curve}
    return curves


def _markdown(report):
    lines = [f"Command: `{report['command']}`", ""]
    for suite in ("ptb", "wikitext"):
        if suite in report:
            r = report[suite]
            lines += [f"### {suite}", "", "```", r["table"], "```",
                      f"PSMM / LSTM valid perplexity {r['valid_ratio']:.3f} (target <= "
                      f"{r['target']:.2f}: {'met' if r['meets_target'] else 'NOT met'})", ""]
    if "memory" in report:
        lines += ["### pointer memory: recompute vs cache (PSMM, wikitext suite)", "",
                  "| mode | epoch | train seconds | valid ppl | tokens/s |",
                  "|---|---:|---:|---:|---:|"]
        for mode, entry in report["memory"].items():
            for p in entry["curve"]:
                lines.append(f"| {mode} | {p['epoch']} | {p['train_seconds']:.0f} | "
                             f"{p['valid_perplexity']:.2f} | {p['tokens_per_second']:.0f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv):
    del argv
    data, out = _shared_data(), Path(FLAGS.output_dir)
    if not data.is_dir():
        sys.exit(f"Shared data not found at {data}; pass --shared_data or set PSMM_SHARED_DATA.")
    out.mkdir(parents=True, exist_ok=True)
    report_path = out / "quality.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    report["command"] = " ".join(["python benchmarks/quality.py"] + sys.argv[1:])
    for suite in FLAGS.suites:
        start = time.time()
        report[suite] = _memory(data, out) if suite == "memory" else _pair(suite, data, out)
        report[f"{suite}_wall_seconds"] = time.time() - start
        report_path.write_text(json.dumps(report, indent=2))
        (out / "quality.md").write_text(_markdown(report))
        print(_markdown({k: v for k, v in report.items() if k in (suite, "command")}),
              flush=True)


if __name__ == "__main__":
    app.run(main)
