"""Evaluating a finished (or running) training run: perplexity, Figure 4, gate, attention page."""

import dataclasses
import json
import math
from pathlib import Path

import keras
import numpy as np

from psmm_tf.configs import ExperimentConfig
from psmm_tf.data.vocabulary import Vocabulary
from psmm_tf.models import build_model
from psmm_tf.training import (
    analysis,
    cache_evaluation,
    checkpointing,
    corpus_setup,
    pointer_diagnostics,
    visualisation,
)
from psmm_tf.training.evaluation import Evaluator


class RunLoadError(ValueError):
    """A run cannot be evaluated as asked: its vocabulary, corpus or split (nothing written)."""


@dataclasses.dataclass
class TrainedRun:
    """A run's config, corpus and model, loaded from its workdir."""

    config: ExperimentConfig
    corpus: corpus_setup.Corpus
    model: keras.Model
    source: str


def load_trained_run(workdir, data_dir=None):
    """Loads `workdir/model.keras` (or, before the first epoch ends, the latest checkpoint).

    Args:
        workdir: str or path. A training run's directory (see `checkpointing`).
        data_dir: optional str. Where the corpus files are now, if not where the run read them.

    Returns:
        A `TrainedRun`.

    Raises:
        RunLoadError: `vocab.txt` is not the run's (its `vocab.sha256`), `data_dir` is given for
            a synthetic run (whose corpus is regenerated in the workdir, never in a data
            folder), or the corpus cannot be read.
    """
    workdir = Path(workdir)
    config = ExperimentConfig.from_json((workdir / checkpointing.CONFIG_FILE).read_text())
    if data_dir is not None:
        if config.data.dataset == "synthetic":
            raise RunLoadError(
                f"data_dir={data_dir}: the run in {workdir} trained on the synthetic corpus, "
                "which is regenerated in its workdir; a data folder is neither read nor "
                "written for it.")
        config = config.replace(data={"data_dir": str(data_dir)})
    vocab_path = workdir / checkpointing.VOCAB_FILE
    try:
        checkpointing.check_vocabulary(vocab_path, workdir)
    except ValueError as err:
        raise RunLoadError(str(err)) from None
    vocabulary = Vocabulary.load(vocab_path)
    try:
        corpus = corpus_setup.load_corpus(config.data, scratch_dir=workdir / "synthetic_data",
                                          vocabulary=vocabulary)
    except (FileNotFoundError, NotADirectoryError, ValueError) as err:
        raise RunLoadError(f"Corpus of {workdir} (dataset={config.data.dataset!r}, data_dir="
                           f"{config.data.data_dir}): {err}") from None
    model_path = workdir / checkpointing.MODEL_FILE
    if model_path.is_file():
        model, source = keras.saving.load_model(model_path), str(model_path)
    else:
        model = build_model(config.model)
        model.set_vocabulary(vocabulary.tokens)
        source = checkpointing.restore_model_weights(
            model, str(workdir / checkpointing.CHECKPOINT_DIR))
        if source is None:
            raise FileNotFoundError(f"{workdir} holds neither {checkpointing.MODEL_FILE} nor a "
                                    "checkpoint: no trained model to evaluate.")
    return TrainedRun(config=config, corpus=corpus, model=model, source=source)


def model_label(model_config):
    """The model's kind, with "+input_output_gate" for a gate on a trained model."""
    suffix = "+input_output_gate" if model_config.base_model is not None else ""
    return model_config.kind + suffix


def evaluation_report(workdir, output_dir, split="test", baseline_workdir=None, data_dir=None,
                      max_tokens=None, batch_size=1, length=None, num_buckets=10,
                      bucket_by="types", positions=None, num_examples=8, cache=None):
    """Evaluates a run on a split and writes the report files into `output_dir`.

    Files: `metrics.json` (perplexity, gate statistics, for a sentinel pointer its diagnostics
    under `pointer` (`pointer_diagnostics`), and with a baseline the Figure 4 rows),
    `attention.html` (models with a pointer), and with `baseline_workdir`
    `frequency_buckets.md` and `frequency_buckets.png` (Figure 4: baseline minus model).

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
        cache: optional `cache_evaluation.CacheSettings`: also evaluate with a neural cache
            (Grave et al. 2017), its theta and lambda given or searched on the validation
            split; the result goes under `neural_cache` (see `cache_evaluation.cache_metrics`).

    Returns:
        dict: the contents of `metrics.json`.
    """
    output_dir = Path(output_dir)
    run = load_trained_run(workdir, data_dir)
    if split not in run.corpus.ids:
        raise RunLoadError(f"split={split!r}: the corpus of {workdir} has no file for it (it "
                           f"has {sorted(run.corpus.ids)}).")
    output_dir.mkdir(parents=True, exist_ok=True)
    ids = run.corpus.ids[split][:max_tokens] if max_tokens else run.corpus.ids[split]
    length = length or run.config.train.eval_length
    window = run.config.model.window_size
    targets = ids[1:]
    in_window = analysis.target_in_window(ids, window)
    has_pointer = run.config.model.kind != "lstm"
    evaluator = Evaluator(run.model, batch_size=batch_size, length=length)
    if has_pointer and positions is None:
        # A first pass finds where the pointer took the most mass, a second keeps attention.
        first = evaluator.evaluate(ids, collect=True)
        positions = visualisation.choose_positions(first.gate, in_window, num_examples)
    result = evaluator.evaluate(ids, collect=True,
                                attention_positions=(positions or ()) if has_pointer else ())
    bucket_of = analysis.frequency_buckets(run.corpus.train_counts, num_buckets, bucket_by)
    metrics = {
        "workdir": str(workdir), "model": model_label(run.config.model), "split": split,
        "model_source": run.source, "num_targets": result.num_targets,
        "perplexity": result.perplexity,
        "gate": analysis.gate_statistics(result.gate, targets, in_window, bucket_of, num_buckets),
    }
    if baseline_workdir is not None:
        baseline = load_trained_run(baseline_workdir, data_dir)
        if baseline.corpus.vocabulary != run.corpus.vocabulary:
            raise RunLoadError(f"baseline_workdir={baseline_workdir} has another vocabulary "
                               f"than {workdir}; the frequency comparison needs the same one.")
        other = Evaluator(baseline.model, batch_size=batch_size, length=length).evaluate(
            ids, collect=True)
        rows = analysis.bucket_comparison(targets, result.nll, other.nll, bucket_of,
                                          run.corpus.train_counts, num_buckets)
        names = (model_label(run.config.model), model_label(baseline.config.model))
        if names[0] == names[1]:
            names = ("model", "baseline")
        (output_dir / "frequency_buckets.md").write_text(
            analysis.format_bucket_table(rows, *names))
        analysis.plot_buckets(rows, output_dir / "frequency_buckets.png", *names)
        metrics.update(baseline_workdir=str(baseline_workdir),
                       baseline_perplexity=other.perplexity, frequency_buckets=rows)
    if has_pointer and result.attention:
        words = run.corpus.vocabulary.tokens
        examples = [{
            "position": j, "words": [words[i] for i in entry["key_ids"]],
            "weights": entry["weights"].tolist(), "target": words[targets[j]],
            "gate": float(result.gate[j]), "probability": math.exp(-result.nll[j]),
        } for j, entry in sorted(result.attention.items())]
        title = f"Pointer attention: {model_label(run.config.model)} on {split} ({workdir})"
        (output_dir / "attention.html").write_text(
            visualisation.render_attention_html(examples, title), encoding="utf-8")
        metrics["attention_positions"] = sorted(result.attention)
    if pointer_diagnostics.has_sentinel_pointer(run.model):
        metrics["pointer"] = pointer_diagnostics.pointer_diagnostics(
            run.model, ids, length=length,
            initial_weights=pointer_diagnostics.load_initial_pointer_weights(
                Path(workdir) / checkpointing.INITIAL_POINTER_FILE))
    if cache is not None:
        metrics["neural_cache"] = cache_evaluation.cache_metrics(
            cache, split, workdir=workdir, run=run, data_dir=data_dir, max_tokens=max_tokens,
            batch_size=batch_size, length=length)
    (output_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, default=_plain))
    return metrics


def _plain(value):
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
