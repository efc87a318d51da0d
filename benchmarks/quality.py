r"""Quality benchmark: the models of the source papers on one backbone, budget and seed.

Suites (each trained row is a normal, resumable training run under --output_dir/<suite>/):
  ptb        Penn Treebank, `small` preset (2x200, window 50, BPTT 35, batch 20).
             Target (the paper's ratio 72.4 / 80.6): PSMM / LSTM valid perplexity <= 0.90.
  wikitext   WikiText-2's files under --shared_data: trained on wiki.valid.tokens (vocabulary:
             every word of it, count >= 1), validated and tested on wiki.test.tokens (there is
             no third file, so the schedule and the cache's grid search see the test text).
             Target (84.8 / 108.7): <= 0.80.
  memory     PSMM with pointer_memory=recompute (windows of C = L - 1 = 49 context + T = 35
             tokens) against "cache" (the wikitext suite's PSMM run): validation perplexity
             against training seconds, epoch by epoch.

Rows of the ptb and wikitext suites (--rows), all with the same backbone and epochs (or, with
--converge, each trained with the paper's schedule until it stops improving):
  lstm, psmm, pointer_softmax   trained from scratch (`train_lib.run`).
  lstm_chars, psmm_chars        the same with character-CNN word inputs
                                (`input_embedding="chars"`, Jozefowicz et al. 2016).
  lstm+cache, psmm+cache        the trained run with a neural cache (Grave et al. 2017) over
                                the same window as PSMM's pointer (--cache_window, default the
                                preset's window_size): theta x lambda grid-searched on one text,
                                the best pair reported on another. PTB: tuned on valid, reported
                                on test. WikiText set (whose valid and test are both wiki.test):
                                tuned on the first half of wiki.test, reported on the second
                                half, where the lstm and psmm rows are also scored
                                (`second_half_perplexity`) so the three compare on one text.
                                PSMM's gate is calibrated (psmm-train's default: two numbers
                                fitted on the validation split); for the second half they
                                are fitted again on the first half alone.
  lstm+iog, psmm+iog            an input-to-output gate (Takase et al. 2017) trained for
                                --iog_epochs on the frozen trained run (Adam, lr 1e-3,
                                embedding 300, dropout 0.5).
  lstm+char_output,             a character-LSTM output layer (Jozefowicz et al. 2016's "Char
  psmm+char_output              LSTM predictions") trained for --char_output_epochs on the
                                frozen trained run (`char_output_training`, its defaults): every
                                word scored by its spelling, a word outside the vocabulary by
                                its own characters; with PSMM underneath the pointer adds its
                                mass to the window's words of the same spelling. Its valid /
                                test perplexity is the open-vocabulary one, over the same tokens
                                as the word models' (which score a word outside the vocabulary
                                as <unk>); the notes give both, and both over those words alone.

Writes <output_dir>/quality.json and <output_dir>/quality.md (tables and the command).

Usage:
  python benchmarks/quality.py --output_dir=/tmp/psmm_quality --suites=wikitext,ptb,memory \
      --ptb_epochs=4 --wikitext_epochs=8
  python benchmarks/quality.py --output_dir=/tmp/psmm_converged --suites=wikitext \
      --rows=lstm,psmm --converge
"""

import json
import math
import os
import sys
import time
from pathlib import Path

from absl import app, flags

from psmm_tf import configs
from psmm_tf.data import evaluation_windows
from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.evaluation.gate_calibration import calibrate_gate
from psmm_tf.evaluation.neural_cache import cache_grid_search
from psmm_tf.evaluation.pointer_diagnostics import has_sentinel_pointer
from psmm_tf.evaluation.trained_run import load_trained_run
from psmm_tf.training import reporting, train_lib

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "/tmp/psmm_quality", "Where the runs and the report go.")
flags.DEFINE_string("shared_data", None, "Folder with ptb/ and wikitext-2/ (default: "
                    "$PSMM_SHARED_DATA, else the shared/data sibling of the repository).")
flags.DEFINE_list("suites", ["ptb", "wikitext", "memory"], "Suites to run, in order.")
flags.DEFINE_list("rows", ["lstm", "psmm", "pointer_softmax", "lstm+cache", "psmm+cache",
                           "lstm+iog", "psmm+iog"], "Rows of the ptb and wikitext suites.")
flags.DEFINE_integer("ptb_epochs", 4, "Epochs of each PTB run.", lower_bound=1)
flags.DEFINE_integer("wikitext_epochs", 8, "Epochs of each WikiText run.", lower_bound=1)
flags.DEFINE_bool("converge", False, "Train the ptb and wikitext rows with the paper's schedule "
                  "instead of a fixed number of epochs: learning rate halved after a worse "
                  "validation epoch, stop after 3 epochs without improvement or at 64.")
flags.DEFINE_integer("iog_epochs", 2, "Epochs of input-to-output gate training.", lower_bound=1)
flags.DEFINE_integer("char_output_epochs", 2, "Epochs of character-LSTM output training.",
                     lower_bound=1)
flags.DEFINE_integer("steps_per_epoch", None, "Limit of steps per epoch (shortened runs).",
                     lower_bound=1)
flags.DEFINE_integer("cache_window", None, "Neural cache size (hidden states); default: the "
                     "preset's window_size, the pointer's window.", lower_bound=1)
flags.DEFINE_list("cache_thetas", ["0.1", "0.2", "0.3", "0.5", "0.7", "1.0"],
                  "Cache flatness values searched on the valid split.")
flags.DEFINE_list("cache_lambdas", ["0.05", "0.1", "0.15", "0.2", "0.3"],
                  "Cache interpolation weights searched on the valid split.")
flags.DEFINE_bool("redo_rows", False, "Recompute rows already in quality.json (by default "
                  "they are kept: a row is written only once complete).")
flags.DEFINE_enum("preset", "small", sorted(configs.PRESETS), "Model and training preset.")
flags.DEFINE_integer("seed", 0, "Seed shared by all runs.")
flags.DEFINE_integer("window_size", None, "The pointer's window L of every row (default: the "
                     "preset's); the caches follow it unless --cache_window is given.",
                     lower_bound=1)

TARGETS = {"ptb": 0.90, "wikitext": 0.80}
# Trained rows: name -> (model kind, model fields set on the preset's).
TRAINED_ROWS = {
    "lstm": ("lstm", {}),
    "psmm": ("psmm", {}),
    "pointer_softmax": ("pointer_softmax", {}),
    # Character-CNN word inputs (Jozefowicz et al. 2016's "CNN inputs").
    "lstm_chars": ("lstm", {"input_embedding": "chars"}),
    "psmm_chars": ("psmm", {"input_embedding": "chars"}),
}


def _shared_data():
    if FLAGS.shared_data:
        return Path(FLAGS.shared_data)
    default = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return Path(os.environ.get("PSMM_SHARED_DATA", default))


def _config(suite, data, kind="psmm", model=None):
    base = configs.get_preset(FLAGS.preset).replace(model=model)
    if FLAGS.window_size:
        base = base.replace(model={"window_size": FLAGS.window_size})
    if FLAGS.converge:  # The paper's schedule (section 5.2): each run stops on its own.
        train = {"seed": FLAGS.seed, "steps_per_epoch": FLAGS.steps_per_epoch,
                 "max_epochs": 64, "patience": 3}
    else:  # A fixed budget: the paper's patience would stop runs at different epochs.
        train = {"seed": FLAGS.seed, "steps_per_epoch": FLAGS.steps_per_epoch,
                 "max_epochs": FLAGS.ptb_epochs if suite == "ptb" else FLAGS.wikitext_epochs,
                 "patience": 1000}
    if suite == "ptb":
        return base.replace(model={"kind": kind}, train=train,
                            data={"dataset": "ptb", "data_dir": str(data / "ptb")})
    return base.replace(model={"kind": kind}, train=train, data={
        "dataset": "wikitext2", "data_dir": str(data / "wikitext-2"), "train_split": "valid",
        "valid_split": "test", "test_split": "test", "min_count": 1})


def _tuning_and_report_texts(suite, corpus):
    """(text the cache is tuned on, text it is reported on) for a suite (see the docstring),
    each as `(ids, spelling)`: the spelling for a model with character inputs, else None."""
    def text(role, start=None, stop=None):
        return corpus.ids[role][start:stop], corpus.spelling(role, start, stop)

    if suite == "ptb":
        return text("valid"), text("test")
    half = len(corpus.ids["test"]) // 2
    return text("test", None, half), text("test", half)


def _load_run(suite, kind, out):
    """The trained run `kind` of `suite`, its PSMM gate calibrated on the tuning text only.

    psmm-train fits the gate's calibration on the validation split; on the WikiText set that
    is all of wiki.test, whose second half is reported: there the fit is redone on the first
    half, like the cache's grid.
    """
    run = load_trained_run(out / suite / kind)
    if suite == "wikitext" and has_sentinel_pointer(run.model) \
            and run.model.pointer.gate_calibration is not None:
        run.model.set_gate_calibration(None)
        ids, spelling = _tuning_and_report_texts(suite, run.corpus)[0]
        calibrate_gate(run.model, ids, length=run.config.train.eval_length, spelling=spelling)
    return run


def _trained_row(suite, name, data, out):
    kind, model = TRAINED_ROWS[name]
    workdir = out / suite / name
    results = train_lib.run(_config(suite, data, kind, model), workdir, verbose=0)
    # With a calibrated gate (psmm-train's default), valid is the calibrated model's (its two
    # numbers fitted on valid) and test the model.keras one (fitted on valid, scored on test).
    row = {"valid_perplexity": train_lib.model_valid_perplexity(results),
           "trained_gate_valid_perplexity": results["best_valid_perplexity"],
           "test_perplexity": results.get("test_perplexity", math.nan),
           "epochs": results["epochs"], "train_seconds": results["train_seconds"]}
    if "pointer" in results:  # diagnostics on the validation split (train_lib.run)
        row["pointer"] = results["pointer"]
    if "gate_calibration" in results:
        row["gate_calibration"] = results["gate_calibration"]["gate_calibration"]
    if suite == "wikitext":
        run = _load_run(suite, name, out)
        ids, spelling = _tuning_and_report_texts(suite, run.corpus)[1]
        row["second_half_perplexity"] = Evaluator(run.model).evaluate(
            ids, spelling=spelling).perplexity
    return row


def _cache_row(suite, kind, out):
    """Grid search of the cache on one text, then the best (theta, lambda) on another."""
    run = _load_run(suite, kind, out)
    thetas = [float(t) for t in FLAGS.cache_thetas]
    lambdas = [float(v) for v in FLAGS.cache_lambdas]
    window = FLAGS.cache_window or run.config.model.window_size
    length = run.config.train.eval_length
    (tune_ids, tune_spelling), (report_ids, report_spelling) = _tuning_and_report_texts(
        suite, run.corpus)
    start = time.time()
    search = cache_grid_search(run.model, evaluation_windows(tune_ids, 1, length,
                                                             spelling=tune_spelling),
                               thetas, lambdas, window=window)
    best = search["best"]
    reported = cache_grid_search(run.model, evaluation_windows(report_ids, 1, length,
                                                               spelling=report_spelling),
                                 [best["theta"]], [best["lambda"]], window=window)["best"]
    grid = {(e["theta"], e["lambda"]): e["perplexity"] for e in search["grid"]}
    row = {"tuned_perplexity": best["perplexity"], "theta": best["theta"],
           "lambda": best["lambda"], "window": window, "search_seconds": time.time() - start,
           "grid": {f"{t},{v}": p for (t, v), p in sorted(grid.items())}}
    if suite == "ptb":  # tuned on valid: that is its valid perplexity
        row.update(valid_perplexity=best["perplexity"], test_perplexity=reported["perplexity"])
    else:  # tuned on the first half of wiki.test, reported on the second
        row.update(valid_perplexity=math.nan, test_perplexity=math.nan,
                   second_half_perplexity=reported["perplexity"])
    return row


def _iog_row(suite, kind, out):
    """An input-to-output gate trained on the frozen run `kind`."""
    from psmm_tf.training.gate_training import input_output_gate_config

    config = input_output_gate_config(out / suite / kind, max_epochs=FLAGS.iog_epochs,
                                      seed=FLAGS.seed, steps_per_epoch=FLAGS.steps_per_epoch)
    config = config.replace(train={"patience": 1000})
    results = train_lib.run(config, out / suite / f"{kind}_iog", verbose=0)
    return {"valid_perplexity": results["best_valid_perplexity"],
            "test_perplexity": results.get("test_perplexity", math.nan),
            "epochs": results["epochs"], "train_seconds": results["train_seconds"]}


def _char_output_row(suite, kind, out):
    """A character-LSTM output layer trained on the frozen run `kind`."""
    from psmm_tf.training.char_output_training import CharOutputConfig
    from psmm_tf.training.char_output_training import run as train_char_output

    config = CharOutputConfig(base_workdir=str(out / suite / kind), seed=FLAGS.seed,
                              epochs=FLAGS.char_output_epochs,
                              steps_per_epoch=FLAGS.steps_per_epoch)
    results = train_char_output(config, out / suite / f"{kind}_char_output", verbose=0)
    test = results.get("test", {})
    return {"valid_perplexity": results["valid"]["open_perplexity"],
            "test_perplexity": test.get("open_perplexity", math.nan),
            "epochs": results["epochs"], "train_seconds": results["train_seconds"],
            "open_vocabulary": {"valid": results["valid"], "test": test}}


def _suite(suite, data, out, previous):
    rows = dict(previous.get("rows", {}))
    # Trained rows first: the cache and gate rows read their runs.
    wanted = [r for r in FLAGS.rows if r in TRAINED_ROWS]
    wanted += [r for r in FLAGS.rows if r not in TRAINED_ROWS]
    for row in wanted:
        if row in rows and not FLAGS.redo_rows:
            continue
        start = time.time()
        if row in TRAINED_ROWS:
            rows[row] = _trained_row(suite, row, data, out)
        elif row.endswith("+cache"):
            rows[row] = _cache_row(suite, row.split("+")[0], out)
        elif row.endswith("+iog"):
            rows[row] = _iog_row(suite, row.split("+")[0], out)
        elif row.endswith("+char_output"):
            rows[row] = _char_output_row(suite, row.split("+")[0], out)
        else:
            raise app.UsageError(f"--rows: unknown row {row!r}; expected one of "
                                 f"{', '.join(TRAINED_ROWS)}, lstm+cache, psmm+cache, "
                                 "lstm+iog, psmm+iog, lstm+char_output, psmm+char_output.")
        rows[row]["wall_seconds"] = time.time() - start
        print(f"{suite} {row}: valid {rows[row]['valid_perplexity']:.2f} test "
              f"{rows[row]['test_perplexity']:.2f}", flush=True)
    entry = {"rows": rows, "target": TARGETS[suite]}
    if "psmm" in rows and "lstm" in rows:
        entry["valid_ratio"] = rows["psmm"]["valid_perplexity"] / rows["lstm"]["valid_perplexity"]
        entry["meets_target"] = entry["valid_ratio"] <= TARGETS[suite]
        key = "test_perplexity" if suite == "ptb" else "second_half_perplexity"
        if key in rows["psmm"] and key in rows["lstm"]:  # text nothing was fitted on
            entry["held_out_ratio"] = rows["psmm"][key] / rows["lstm"][key]
            entry["held_out_split"] = key
        # The share of a same-window cache's log-perplexity gain over the LSTM that PSMM
        # realises, on the text the cache was not tuned on: log(psmm/lstm) / log(cache/lstm).
        key = "test_perplexity" if suite == "ptb" else "second_half_perplexity"
        if "lstm+cache" in rows and key in rows["lstm"]:
            lstm, cache = rows["lstm"][key], rows["lstm+cache"][key]
            entry["cache_gain_share"] = (math.log(rows["psmm"][key] / lstm)
                                         / math.log(cache / lstm))
            entry["cache_gain_share_split"] = key
    return entry


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


def _suite_markdown(suite, entry):
    rows = entry["rows"]
    base = rows.get("lstm", {}).get("valid_perplexity")
    half = suite == "wikitext"
    lines = [f"### {suite}", "", "| model | valid ppl | test ppl | / LSTM (valid) | "
             + ("2nd half of test | " if half else "") + "epochs | train s | notes |",
             "|---|---:|---:|---:|" + ("---:|" if half else "") + "---:|---:|---|"]
    for name, r in rows.items():
        ratio = (f"{r['valid_perplexity'] / base:.3f}"
                 if base and not math.isnan(r["valid_perplexity"]) else "-")
        notes = (f"theta {r['theta']}, lambda {r['lambda']}, window {r['window']}"
                 if "theta" in r else "")
        if "pointer" in r:
            p = r["pointer"]
            notes = (f"gate in/out of window {p['gate_target_in_window']:.3f}/"
                     f"{p['gate_target_not_in_window']:.3f}, query kernel moved "
                     f"{p['weights']['query_kernel'].get('relative_change', math.nan):.0%}, "
                     f"query constancy {p['query_constancy']:.2f}")
        if "gate_calibration" in r:
            scale, bias = r["gate_calibration"]
            notes += (f"; gate calibrated on valid (logit x {scale:.2f} {bias:+.2f}), valid "
                      f"{r['trained_gate_valid_perplexity']:.2f} with the trained gate")
        if "open_vocabulary" in r:
            v = r["open_vocabulary"]["valid"]
            notes = (f"valid, same {v['tokens']} tokens: word model {v['word_perplexity']:.2f} "
                     f"(outside words as <unk>), character LSTM {v['char_perplexity']:.2f}")
            if v["oov_tokens"]:
                notes += (f"; the {v['oov_tokens']} outside the vocabulary "
                          f"({100 * v['oov_rate']:.1f}%): <unk> {v['oov']['word_perplexity']:.1f},"
                          f" character LSTM {v['oov']['char_perplexity']:.0f}, open vocabulary "
                          f"{v['oov']['open_perplexity']:.0f}")
        second = f"{r.get('second_half_perplexity', math.nan):.2f} | " if half else ""
        lines.append(f"| {name} | {r['valid_perplexity']:.2f} | {r['test_perplexity']:.2f} | "
                     f"{ratio} | {second}{r.get('epochs', '-')} | "
                     f"{r.get('train_seconds', r.get('search_seconds', 0.0)):.0f} | {notes} |")
    if "valid_ratio" in entry:
        lines += ["", f"PSMM / LSTM valid perplexity {entry['valid_ratio']:.3f} (the paper's "
                  f"ratio {entry['target']:.2f}: {'met' if entry['meets_target'] else 'NOT met'})"]
    if "held_out_ratio" in entry:
        lines.append(f"PSMM / LSTM on text nothing was fitted on ({entry['held_out_split']}): "
                     f"{entry['held_out_ratio']:.3f}")
    if "cache_gain_share" in entry:
        lines.append(f"PSMM realises {entry['cache_gain_share']:.2f} of the same-window cache's "
                     f"log-perplexity gain over the LSTM ({entry['cache_gain_share_split']}).")
    return lines + [""]


def _markdown(report):
    lines = [f"Command: `{report['command']}`", ""]
    for suite in ("ptb", "wikitext"):
        if suite in report:
            lines += _suite_markdown(suite, report[suite])
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
        if suite == "memory":
            report[suite] = _memory(data, out)
        else:
            report[suite] = _suite(suite, data, out, report.get(suite, {}))
        report[f"{suite}_wall_seconds"] = time.time() - start
        report_path.write_text(json.dumps(report, indent=2))
        (out / "quality.md").write_text(_markdown(report))
        print(_markdown({k: v for k, v in report.items() if k in (suite, "command")}),
              flush=True)


if __name__ == "__main__":
    app.run(main)
