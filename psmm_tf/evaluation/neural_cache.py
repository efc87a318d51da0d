"""Evaluation with a neural cache (Grave, Joulin and Usunier 2017) on any trained model.

    p_cache(w | h_1..h_t) ∝ sum_{t-W <= i < t, x_{i+1} = w} exp(theta h_t . h_i)   (Grave eq. 2)
    p(w) = (1 - lambda) p_model(w) + lambda p_cache(w)                              (eq. 4)

`h` is the top LSTM layer's hidden state of the model (LSTM, PSMM, pointer softmax, or an
input-to-output gate on one of them) and `p_model` its own distribution (the mixture for the
pointer models); the equations are in `psmm_tf.layers.neural_cache`. Nothing is trained: the
window `W` is chosen by the user, and `theta` and `lambda` either given or chosen by a grid search
on the validation split (the paper's procedure). The first target of a text has no history and
keeps `p_model`. Splits are read as by `Evaluator`: in windows of `length` tokens with the LSTM
state, the pointer memory and the cache carried, so with one stream (`batch_size=1`) every target
sees its full history.

One settings type (`CacheSettings`) with one validation (`check_cache_settings`) serves
psmm-evaluate and psmm-export; one grid search (`cache_grid_search`) serves both the evaluation
of a run (`cache_metrics`) and the benchmarks. Written with `keras.ops` and NumPy windows
(TensorFlow and JAX backends); `cache_metrics` reads a run's corpus through its TFDS builder,
imported when called.
"""

import dataclasses
import itertools
import math

import numpy as np
from keras import ops

from psmm_tf.layers import neural_cache

# Grave et al.'s typical values for a cache of about 100 states (their Figure 2).
DEFAULT_THETA = 0.3
DEFAULT_LAMBDA = 0.1
# Grave et al.'s Figure 2 explores theta in [0, 1] and lambda in [0, 0.4] on PTB and WikiText-2;
# their best values lie inside these grids (e.g. theta 0.3, lambda 0.1 to 0.2 for W = 100).
DEFAULT_THETAS = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
DEFAULT_LAMBDAS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4)


# The longest cache accepted: 10x the longest of Grave et al. (2017), 10,000 on WikiText-103.
# A stream's cache is window x hidden floats (0.6 GB at 2x1500) and each position scores the
# window's keys under every theta of a grid; without a bound a mistyped window asked for tens of
# GB (psmm-evaluate) or a constant over 2 GB that no SavedModel can hold (psmm-export).
MAX_CACHE_WINDOW = 100_000


def check_cache_settings(window, thetas=(), lambdas=(), names=("window", "theta", "lambda")):
    """The one validation of a neural cache's settings (evaluation and export).

    Raises ValueError, naming the setting as `names` spells it (e.g. psmm-export's flags),
    unless `window` is an integer in [1, MAX_CACHE_WINDOW], every theta a finite number >= 0
    (an infinite theta makes `exp(theta h_t . h_i)` overflow) and every lambda in [0, 1): at
    lambda 1 every probability comes from the cache, which is empty at a stream's first word
    and holds no unseen word (a perplexity of 2e21 on a test text).
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"{names[0]} must be an integer >= 1 (the number of previous hidden "
                         f"states in the cache), got {window!r}.")
    if window > MAX_CACHE_WINDOW:
        raise ValueError(
            f"{names[0]} must be at most {MAX_CACHE_WINDOW:,} (each stream holds the last "
            f"{names[0]} hidden states and every position scores them: memory grows with it), "
            f"got {window:,}.")
    for theta in thetas:
        if (isinstance(theta, bool) or not isinstance(theta, (int, float))
                or not math.isfinite(theta) or theta < 0):
            raise ValueError(f"{names[1]} must be a finite number >= 0 (the flatness of the "
                             f"cache distribution; 0 is uniform), got {theta!r}.")
    for lam in lambdas:
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not 0.0 <= lam < 1.0:
            raise ValueError(f"{names[2]} must be in [0, 1) (the cache's interpolation weight; "
                             f"at 1 the model's own probabilities are dropped, and a word the "
                             f"cache does not hold, as every word at a stream's start, gets "
                             f"probability 0), got {lam!r}.")


@dataclasses.dataclass(frozen=True)
class CacheSettings:
    """A neural cache's settings: the one type psmm-evaluate and psmm-export use.

    Attributes:
        window: int. `W`: previous hidden states in the cache.
        theta: float. Flatness of the cache distribution (`p_cache ∝ exp(theta h_t . h_i)`),
            used when `search` is False (Grave et al.'s typical 0.3).
        lam: float in [0, 1). Interpolation weight of the cache (typically 0.1).
        search: bool. Evaluation only: choose theta and lambda by grid search on the
            validation split first.
        thetas, lambdas: the grid of the search.
    """

    window: int
    theta: float = DEFAULT_THETA
    lam: float = DEFAULT_LAMBDA
    search: bool = False
    thetas: tuple = DEFAULT_THETAS
    lambdas: tuple = DEFAULT_LAMBDAS

    def __post_init__(self):
        check_cache_settings(self.window, (self.theta, *self.thetas), (self.lam, *self.lambdas))
        if not self.thetas or not self.lambdas:
            raise ValueError("The grid needs at least one theta and one lambda.")

    @classmethod
    def of(cls, cache):
        """The settings of a `NeuralCache`."""
        return cls(cache.window, cache.theta, cache.lam)


class NeuralCache:
    """Scores text with `p = (1 - lambda) p_model + lambda p_cache` (Grave et al. 2017).

    Wraps a trained `LanguageModel` (LSTM, PSMM, ...) without changing or training it: its
    top-layer hidden states and the words that followed them form the cache. Texts are read in
    pieces with state, memory and cache carried, exactly as reading them whole.

    Args:
        model: a `psmm_tf.models.LanguageModel`.
        window: int. Number of previous hidden states in the cache.
        theta: float. Flatness of the cache distribution.
        lam: float in [0, 1). Interpolation weight of the cache.

    Example:
    ```python
    import numpy as np
    from psmm_tf.evaluation import NeuralCache
    from psmm_tf.models import LSTMBackbone, LSTMLanguageModel

    backbone = LSTMBackbone(vocab_size=50, embedding_dim=16, hidden_dim=16, num_layers=2)
    cached = NeuralCache(LSTMLanguageModel(backbone, window_size=10), window=100)
    ids = np.random.default_rng(0).integers(0, 50, size=(2, 41)).astype("int32")
    first = cached.score(ids[:, :20], ids[:, 1:21])    # log_probs (2, 20)
    second = cached.score(ids[:, 20:40], ids[:, 21:41], state=first["state"],
                          memory=first["memory"], cache=first["cache"])
    ```

    References:
        - [Grave et al., 2017](https://arxiv.org/abs/1612.04426)
    """

    def __init__(self, model, window=100, theta=DEFAULT_THETA, lam=DEFAULT_LAMBDA):
        check_cache_settings(window, (theta,), (lam,), names=("window", "theta", "lam"))
        self.model = model
        self.window = window
        self.theta = float(theta)
        self.lam = float(lam)
        self._step = None

    def empty_cache(self, batch_size):
        """The cache at the start of a text."""
        return neural_cache.empty_cache(batch_size, self.window, self.model.hidden_dim)

    def score(self, inputs, targets, token_mask=None, state=None, memory=None, cache=None,
              token_chars=None):
        """Like `LanguageModel.score_with_state`, with the cache; also takes and returns `cache`."""
        out = self.probabilities(inputs, targets, token_mask, state, memory, cache,
                                 thetas=[self.theta], token_chars=token_chars)
        log_probs = neural_cache.interpolate(out["model_log_probs"], out["cache_probs"][0],
                                             out["has_history"], self.lam)
        log_probs = ops.where(out["token_mask"], log_probs, 0.0)
        return {"log_probs": log_probs, "state": out["state"], "memory": out["memory"],
                "cache": out["cache"]}

    def probabilities(self, inputs, targets, token_mask=None, state=None, memory=None,
                      cache=None, thetas=(DEFAULT_THETA,), token_chars=None):
        """The model's log-probabilities and the cache's probabilities for several thetas.

        `token_chars`: optional int `(B, T, max_word_length)`, the inputs' spelling for a model
        with character inputs (`LanguageModel.score_step`).

        Returns:
            dict with `model_log_probs` `(B, T)`, `cache_probs` `(G, B, T)`, `has_history`
            `(B, T)`, `token_mask`, and the carried `state`, `memory`, `cache`.
        """
        inputs = ops.convert_to_tensor(inputs, "int32")
        batch_size = ops.shape(inputs)[0]
        if token_mask is None:
            token_mask = ops.ones(ops.shape(inputs), "bool")
        state = self.model.zero_state(batch_size) if state is None else state
        memory = self.model.empty_memory(batch_size) if memory is None else memory
        cache = self.empty_cache(batch_size) if cache is None else cache
        if self._step is None:
            from psmm_tf.compiled import inference_function

            self._step = inference_function(self.model, self._probabilities)
        return self._step(inputs, ops.convert_to_tensor(targets, "int32"),
                          ops.cast(token_mask, "bool"), state, memory, cache,
                          ops.convert_to_tensor(np.asarray(thetas, np.float32)), token_chars)

    def _probabilities(self, inputs, targets, token_mask, state, memory, cache, thetas,
                       token_chars):
        scores, outputs = self.model.score_step(inputs, targets, token_mask, state, memory,
                                                token_chars=token_chars)
        model_log_probs = scores["log_probs"]
        safe_targets = ops.where(token_mask, targets, 0)
        keys = neural_cache.cache_keys(cache, outputs["hidden"], safe_targets, token_mask)
        cache_probs, has_history = neural_cache.cache_target_probs(
            outputs["hidden"], keys, safe_targets, thetas, self.window)
        return {"model_log_probs": model_log_probs, "cache_probs": cache_probs,
                "has_history": has_history, "token_mask": token_mask,
                "state": outputs["state"], "memory": outputs["memory"],
                "cache": neural_cache.updated_cache(keys, self.window)}


def _log_likelihoods(cache, windows, thetas, lambdas):
    """Summed log p of the weighted targets for every (theta, lambda), in one pass.

    Returns `(cache_sums, model_sum, count)`: float64 `(G, Λ)` with
    `p = (1 - lambdas[l]) p_model + lambdas[l] p_cache(thetas[g])` (Grave et al. eq. 4), the
    same sum for the model alone, and the summed target weights.
    """
    lambda_values = ops.convert_to_tensor(np.asarray(lambdas, np.float32))[None, :, None, None]
    totals = np.zeros((len(thetas), len(lambdas)))
    model_total, count = 0.0, 0.0
    state = memory = cache_state = None
    for batch in windows:
        out = cache.probabilities(batch["token_ids"], batch["targets"], batch["token_mask"],
                                  state, memory, cache_state, thetas=thetas,
                                  token_chars=batch.get("token_chars"))
        state, memory, cache_state = out["state"], out["memory"], out["cache"]
        weights = np.asarray(batch["target_weights"], np.float64)
        # Log-probabilities for every (theta, lambda): [G, Λ, B, T].
        log_probs = neural_cache.interpolate(
            out["model_log_probs"][None, None], out["cache_probs"][:, None],
            out["has_history"], lambda_values)
        totals += np.sum(ops.convert_to_numpy(log_probs).astype(np.float64) * weights,
                         axis=(2, 3))
        model_total += float(np.sum(
            ops.convert_to_numpy(out["model_log_probs"]).astype(np.float64) * weights))
        count += float(np.sum(weights))
    return totals, model_total, count


def cache_grid_search(model, windows, thetas, lambdas, window=100):
    """Perplexity with a cache for every (theta, lambda), in one pass of the model.

    The one grid search of the package: a single pair is a grid of one.

    Args:
        model: a trained `LanguageModel` (its `hidden` output is `h`).
        windows: iterable of dicts with `token_ids`, `targets`, `token_mask`, `target_weights`
            and, for a model with character inputs, `token_chars` (from
            `psmm_tf.data.windows.iter_evaluation_windows` or the tf.data
            `psmm_tf.data.evaluation_windows`), in stream order.
        thetas: sequence of G finite floats >= 0. lambdas: sequence of Λ floats in [0, 1).
        window: int >= 1. Cache size `W`.

    Returns:
        dict with `num_targets` (int), `model_perplexity` (float: the model alone), `grid` (a
        list of dicts `theta`, `lambda`, `perplexity`, theta-major; `lambda = 0` is the model
        alone) and `best` (the grid's entry of lowest perplexity; the first one on ties).

    Raises:
        ValueError: invalid settings, an empty grid, or no targets in `windows`.
    """
    thetas, lambdas = [float(t) for t in thetas], [float(lam) for lam in lambdas]
    if not thetas or not lambdas:
        raise ValueError("The grid needs at least one theta and one lambda.")
    check_cache_settings(window, thetas, lambdas)
    sums, model_sum, count = _log_likelihoods(NeuralCache(model, window=window), windows,
                                              thetas, lambdas)
    if count == 0:
        raise ValueError("cache_grid_search got no targets: `windows` is empty.")
    perplexity = np.exp(-sums / count)
    grid = [{"theta": t, "lambda": lam, "perplexity": float(perplexity[i, j])}
            for (i, t), (j, lam) in itertools.product(enumerate(thetas), enumerate(lambdas))]
    return {"num_targets": int(count), "model_perplexity": math.exp(-model_sum / count),
            "grid": grid, "best": min(grid, key=lambda entry: entry["perplexity"])}


def cache_metrics(settings, split, *, workdir=None, run=None, data_dir=None, max_tokens=None,
                  batch_size=1, length=None):
    """The `neural_cache` entry of an evaluation's metrics for `CacheSettings`.

    With `settings.search`, theta and lambda are chosen by `cache_grid_search` on the
    validation split first (its first `max_tokens` tokens), then applied to `split`.

    Args:
        settings: `CacheSettings`.
        split: "train", "valid" or "test" (the role in the run's config).
        workdir: a training run; read when `run` (a `TrainedRun` already loaded) is None.
        data_dir: optional new location of the corpus files.
        max_tokens: optional int. The first tokens of each split only.
        batch_size, length: evaluation streams and window length (default: the run's
            `eval_length`). B = 1 is exact.

    Returns:
        dict: `split`, `window`, `theta`, `lambda`, `num_targets`, `perplexity` (with the
        cache) and `model_perplexity` (without); with `settings.search` also `search`: the
        grid search's dict with its `split` and `window`.
    """
    from psmm_tf.data.windows import iter_evaluation_windows
    from psmm_tf.evaluation.trained_run import load_trained_run

    if run is None:
        run = load_trained_run(workdir, data_dir)
    length = length or run.config.train.eval_length
    for needed in (split, "valid") if settings.search else (split,):
        if needed not in run.corpus.ids:
            raise ValueError(f"The run's corpus has no {needed!r} split (it has "
                             f"{sorted(run.corpus.ids)}).")

    def grid_search(on_split, thetas, lambdas):
        stop = max_tokens or None
        ids = run.corpus.ids[on_split][:stop]
        spelling = run.corpus.spelling(on_split, stop=stop)
        windows = iter_evaluation_windows(ids, batch_size=batch_size, length=length,
                                          spelling=spelling)
        return cache_grid_search(run.model, windows, thetas, lambdas, settings.window)

    theta, lam, search = settings.theta, settings.lam, None
    if settings.search:
        search = {"split": "valid", "window": settings.window,
                  **grid_search("valid", settings.thetas, settings.lambdas)}
        theta, lam = search["best"]["theta"], search["best"]["lambda"]
    scores = grid_search(split, [theta], [lam])
    result = {"split": split, "window": settings.window, "theta": float(theta),
              "lambda": float(lam), "num_targets": scores["num_targets"],
              "perplexity": scores["best"]["perplexity"],
              "model_perplexity": scores["model_perplexity"]}
    if search is not None:
        result["search"] = search
    return result


def format_cache_metrics(result):
    """Readable lines of a `cache_metrics` dict: the grid (if searched) and the final scores."""
    lines = []
    if "search" in result:
        search = result["search"]
        lambdas = sorted({entry["lambda"] for entry in search["grid"]})
        lines.append(f"neural cache grid search on {search['split']} (window {search['window']},"
                     f" {search['num_targets']} targets, without cache "
                     f"{search['model_perplexity']:.2f}):")
        lines.append("| theta \\ lambda | " + " | ".join(f"{lam:g}" for lam in lambdas) + " |")
        lines.append("|---" * (len(lambdas) + 1) + "|")
        for theta in sorted({entry["theta"] for entry in search["grid"]}):
            row = {e["lambda"]: e["perplexity"] for e in search["grid"] if e["theta"] == theta}
            lines.append(f"| {theta:g} | " + " | ".join(f"{row[lam]:.2f}" for lam in lambdas)
                         + " |")
        best = search["best"]
        lines.append(f"best: theta {best['theta']:g}, lambda {best['lambda']:g} "
                     f"({best['perplexity']:.2f})")
    lines.append(f"neural cache {result['split']} perplexity {result['perplexity']:.2f} "
                 f"(window {result['window']}, theta {result['theta']:g}, lambda "
                 f"{result['lambda']:g}); without cache {result['model_perplexity']:.2f}")
    return "\n".join(lines)
