"""Evaluation of trained models: exact perplexity, the neural cache, reports and analysis.

- `evaluator`: `Evaluator` / `EvaluationResult`, exact perplexity with state carried;
- `neural_cache`: `NeuralCache`, `CacheSettings` + `check_cache_settings` (the one settings type
  and validation, also psmm-export's), `cache_grid_search` (the one grid search), `cache_metrics`;
- `trained_run`: `load_trained_run`, a run's config, corpus and model from its workdir;
- `report`: `evaluation_report`, the files of a run's report; `evaluate_lib`: psmm-evaluate's
  options and `run_evaluation`;
- `analysis`, `figures`, `pointer_diagnostics`: Figure 4, the attention page (Figures 5-12),
  the pointer's diagnostics.

`Evaluator`, `NeuralCache` and its settings are written with `keras.ops` and NumPy windows and
run on the TensorFlow and JAX backends (JAX without TensorFlow installed too); `load_trained_run`,
which reads a run's corpus through its TFDS builder, is imported on first use.
"""

from psmm_tf.evaluation.evaluator import EvaluationResult, Evaluator
from psmm_tf.evaluation.neural_cache import (
    CacheSettings,
    NeuralCache,
    cache_grid_search,
    check_cache_settings,
)


def __getattr__(name):
    if name == "load_trained_run":
        from psmm_tf.evaluation.trained_run import load_trained_run

        return load_trained_run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CacheSettings",
    "EvaluationResult",
    "Evaluator",
    "NeuralCache",
    "cache_grid_search",
    "check_cache_settings",
    "load_trained_run",
]
