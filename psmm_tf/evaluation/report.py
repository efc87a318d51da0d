"""Evaluating a finished (or running) training run: perplexity, Figure 4, gate, attention page."""

import contextlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from psmm_tf import workdir as run_files
from psmm_tf.evaluation import analysis, figures, neural_cache, pointer_diagnostics
from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.evaluation.trained_run import RunLoadError, load_trained_run
from psmm_tf.models.registry import model_class

# The files a report writes; a new report in a folder replaces an earlier one's as a whole.
REPORT_FILES = ("metrics.json", "attention.html", "frequency_buckets.md", "frequency_buckets.png")


def model_label(model_config):
    """The model's kind, with "+input_output_gate" for a gate on a trained model."""
    suffix = "+input_output_gate" if model_config.base_model is not None else ""
    return model_config.kind + suffix


def evaluation_report(workdir, output_dir, split="test", baseline_workdir=None, data_dir=None,
                      max_tokens=None, batch_size=1, length=None, num_buckets=10,
                      bucket_by="types", positions=None, num_examples=8, cache=None,
                      model_source="best", tfds_data_dir=None, mixed_precision=None,
                      trained_gate=False):
    """Evaluates a run on a split and writes the report files into `output_dir`.

    Files: `metrics.json` (perplexity, gate statistics, for a sentinel pointer its diagnostics
    under `pointer` (`pointer_diagnostics`, of the gate as the model applies it) and its
    `gate_calibration` (`[scale, bias]` or None), and with a baseline the Figure 4 rows),
    `attention.html` (models with a pointer), and with `baseline_workdir`
    `frequency_buckets.md` and `frequency_buckets.png` (Figure 4: baseline minus model).
    They are written when the whole report is done and replace an earlier report's in
    `output_dir` (those the new report does not have are removed; other files, and files of
    those names where the folder held no report, are left as they are); a report that fails
    leaves an earlier report as it was.

    Args:
        workdir: the run to evaluate. output_dir: where the files go (created).
        split: "train", "valid" or "test" (the role in the run's config).
        baseline_workdir: optional run of the comparison model (same vocabulary).
        data_dir: optional new location of the corpus files.
        max_tokens: optional int. Evaluate the first tokens of the split only.
        batch_size, length: evaluation streams and window length (B = 1 is exact).
        num_buckets, bucket_by: frequency buckets (see `analysis.frequency_buckets`).
        positions: optional target indices for the attention page (default: chosen).
        num_examples: int. Examples chosen when `positions` is None.
        cache: optional `neural_cache.CacheSettings`: also evaluate with a neural cache
            (Grave et al. 2017), its theta and lambda given or searched on the validation
            split; the result goes under `neural_cache` (see `neural_cache.cache_metrics`).
        model_source: "best" (`model.keras`) or "latest" (the newest checkpoint), for the run
            and the baseline; named in the metrics (`model_source`, `model_path`).
        tfds_data_dir: optional str. Where the corpus is prepared as a TFDS dataset, if not
            where the run's config says.
        mixed_precision: optional Keras dtype policy to compute in (run and baseline) instead
            of each run's own (`trained_run.load_trained_run`); named in the metrics.
        trained_gate: bool. Score a sentinel pointer's gate as trained, without the
            calibration in its model.keras (`gate_calibration` is then None in the metrics).

    Returns:
        dict: the contents of `metrics.json`.
    """
    output_dir = Path(output_dir)
    _check_output_dir(output_dir)
    run = load_trained_run(workdir, data_dir, model_source, tfds_data_dir, mixed_precision)
    if trained_gate:
        if not pointer_diagnostics.has_sentinel_pointer(run.model):
            raise RunLoadError(f"trained_gate: the model of {workdir} ({run.config.model.kind}) "
                               "has no sentinel gate to score as trained; leave --trained_gate "
                               "out.")
        run.model.set_gate_calibration(None)
    if split not in run.corpus.ids:
        raise RunLoadError(f"split={split!r}: the corpus of {workdir} has no file for it (it "
                           f"has {sorted(run.corpus.ids)}).")
    ids = run.corpus.ids[split][:max_tokens] if max_tokens else run.corpus.ids[split]
    spelling = run.corpus.spelling(split, stop=len(ids))
    try:  # before the evaluation passes
        bucket_of = analysis.frequency_buckets(run.corpus.train_counts, num_buckets, bucket_by)
    except ValueError as err:
        raise RunLoadError(str(err)) from None
    has_pointer = model_class(run.config.model.kind).has_pointer
    if positions is not None:
        _check_positions(positions, has_pointer, run, workdir, split, len(ids))
    with _staged_report(output_dir) as staging:
        length = length or run.config.train.eval_length
        targets = ids[1:]
        in_window = analysis.target_in_window(ids, run.config.model.window_size)
        evaluator = Evaluator(run.model, batch_size=batch_size, length=length)
        if has_pointer and positions is None:
            # A first pass finds where the pointer took the most mass, a second keeps attention.
            first = evaluator.evaluate(ids, collect=True, spelling=spelling)
            positions = figures.choose_positions(first.gate, in_window, num_examples)
        result = evaluator.evaluate(ids, collect=True, spelling=spelling,
                                    attention_positions=(positions or ()) if has_pointer else ())
        metrics = {
            "workdir": str(workdir), "model": model_label(run.config.model), "split": split,
            "model_source": run.model_source, "model_path": run.source,
            "mixed_precision": run.config.train.mixed_precision,
            "num_targets": result.num_targets,
            "perplexity": result.perplexity,
            "gate": analysis.gate_statistics(result.gate, targets, in_window, bucket_of,
                                             num_buckets),
        }
        if baseline_workdir is not None:
            baseline = load_trained_run(baseline_workdir, data_dir, model_source, tfds_data_dir,
                                        mixed_precision)
            metrics.update(_frequency_comparison(run, baseline, baseline_workdir, workdir, split,
                                                 ids, result, bucket_of, num_buckets, batch_size,
                                                 length, staging))
        if has_pointer and result.attention:
            _write_attention_page(run, workdir, split, targets, result, staging)
            metrics["attention_positions"] = sorted(result.attention)
        if pointer_diagnostics.has_sentinel_pointer(run.model):
            calibration = run.model.pointer.gate_calibration
            metrics["gate_calibration"] = None if calibration is None else list(calibration)
            metrics["pointer"] = pointer_diagnostics.pointer_diagnostics(
                run.model, ids, length=length, spelling=spelling,
                initial_weights=pointer_diagnostics.load_initial_pointer_weights(
                    Path(workdir) / run_files.INITIAL_POINTER_FILE))
        if cache is not None:
            metrics["neural_cache"] = neural_cache.cache_metrics(
                cache, split, workdir=workdir, run=run, data_dir=data_dir, max_tokens=max_tokens,
                batch_size=batch_size, length=length)
        run_files.write_text_atomic(staging / "metrics.json",
                                    json.dumps(metrics, indent=2, default=_plain))
    return metrics


def _check_output_dir(output_dir):
    """Raises RunLoadError unless `output_dir` can hold a report (a folder, or nothing yet)."""
    if output_dir.exists() and not output_dir.is_dir():
        raise RunLoadError(f"output_dir={output_dir} is a file; expected a folder for the "
                           "report (or a path that does not exist yet).")
    for name in REPORT_FILES:
        if (output_dir / name).is_dir():
            raise RunLoadError(f"output_dir={output_dir} holds a folder {name} where the report "
                               "writes a file; move it away or choose another output_dir.")


def _check_positions(positions, has_pointer, run, workdir, split, num_tokens):
    """Raises RunLoadError unless `positions` are targets of the split, for a pointer model."""
    if not has_pointer:
        raise RunLoadError(f"positions={list(positions)}: the model of {workdir} "
                           f"({run.config.model.kind}) has no pointer, so no attention "
                           "page; leave --positions out.")
    outside = [p for p in positions if not 0 <= p < num_tokens - 1]
    if outside:
        raise RunLoadError(f"positions={list(positions)}: {outside} outside the {num_tokens - 1}"
                           f" targets of split={split!r} (indices 0 to {num_tokens - 2}).")


def _frequency_comparison(run, baseline, baseline_workdir, workdir, split, ids, result,
                          bucket_of, num_buckets, batch_size, length, staging):
    """Figure 4: the baseline's and the model's loss per frequency bucket, written as
    frequency_buckets.md and .png into `staging`; returns the metrics' entries."""
    if baseline.corpus.vocabulary != run.corpus.vocabulary:
        raise RunLoadError(f"baseline_workdir={baseline_workdir} has another vocabulary "
                           f"than {workdir}; the frequency comparison needs the same one.")
    other = Evaluator(baseline.model, batch_size=batch_size, length=length).evaluate(
        ids, collect=True, spelling=baseline.corpus.spelling(split, stop=len(ids)))
    rows = analysis.bucket_comparison(ids[1:], result.nll, other.nll, bucket_of,
                                      run.corpus.train_counts, num_buckets)
    names = (model_label(run.config.model), model_label(baseline.config.model))
    if names[0] == names[1]:
        names = ("model", "baseline")
    run_files.write_text_atomic(staging / "frequency_buckets.md",
                                analysis.format_bucket_table(rows, *names))
    analysis.plot_buckets(rows, staging / "frequency_buckets.png", *names)
    return {"baseline_workdir": str(baseline_workdir), "baseline_perplexity": other.perplexity,
            "frequency_buckets": rows}


def _write_attention_page(run, workdir, split, targets, result, staging):
    """attention.html in `staging`: the pointer's attention at the positions `result` kept."""
    words = run.corpus.vocabulary.tokens
    examples = [{
        "position": j, "words": [words[i] for i in entry["key_ids"]],
        "weights": entry["weights"].tolist(), "target": words[targets[j]],
        "gate": float(result.gate[j]), "probability": math.exp(-result.nll[j]),
    } for j, entry in sorted(result.attention.items())]
    title = f"Pointer attention: {model_label(run.config.model)} on {split} ({workdir})"
    run_files.write_text_atomic(staging / "attention.html",
                                figures.render_attention_html(examples, title))


@contextlib.contextmanager
def _staged_report(output_dir):
    """A new folder inside `output_dir` to write a report into; when the block ends without an
    error, its files replace the report in `output_dir` (metrics.json last) and, where
    `output_dir` held a report (its metrics.json), that report's files the new one does not
    have are removed; files of the same names that are not a report's are left. The folder is
    removed (not after a kill: a hidden `.report-*` folder then stays).

    Raises:
        RunLoadError: `output_dir` cannot be created or written into.
    """
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".report-", dir=output_dir))
    except OSError as err:
        raise RunLoadError(f"output_dir={output_dir}: cannot create it or write into it "
                           f"({err.strerror}).") from None
    try:
        yield staging
        earlier_report = _is_report(output_dir / "metrics.json")
        for name in sorted(REPORT_FILES, key=lambda name: name == "metrics.json"):
            new, old = staging / name, output_dir / name
            if new.exists():
                os.replace(new, old)
            elif earlier_report and (old.is_file() or old.is_symlink()):
                old.unlink()
    except OSError as err:
        raise RunLoadError(f"output_dir={output_dir}: cannot write the report there "
                           f"({err.strerror or err}).") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _is_report(path):
    """Whether `path` is the metrics.json of a report (`evaluation_report`'s): only then are
    the files of that report that a new one lacks its own, to be removed."""
    try:
        metrics = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(metrics, dict) and {"workdir", "model", "perplexity"} <= metrics.keys()


def _plain(value):
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
