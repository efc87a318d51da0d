"""Has the pointer learnt anything? Diagnostics of a trained pointer sentinel model.

A perplexity ratio alone cannot tell a trained pointer from a uniform prior over the window
mixed with a unigram softmax. These numbers can (Merity et al. 2016 eq. 3-8 notation: query
`q = tanh(W h_t + b)`, attention `a`, gate `g`, vocabulary softmax `p_vocab`):

- `gate_target_in_window` / `gate_target_not_in_window`: the mean gate when the target can be
  copied from the window and when it cannot. A trained sentinel gives the pointer more mass
  (a lower gate) when the target is there.
- `pointer_precision`: the share of the pointer's mass that lands on the target's word,
  `sum_j sum_{i: x_i = y_j} a_ji / sum_j (1 - g_j)`, over all targets and over targets in the
  window. A uniform attention scores about `(targets in window) / L`.
- `gate_offset`: the `delta` added to the gate's logit that minimises the negative log-likelihood
  `-log(g' p_vocab(y) + (1 - g') r(y))`, `g' = sigmoid(logit(g) + delta)`, with the pointer's
  own distribution `r = p_ptr / (1 - g)` kept: 0 for a calibrated gate, large and positive for a
  gate that gives the pointer too much mass, negative for one that gives it too little;
  `gate_offset_log_ppl_gain` is what the offset would save (nats per target).
- `attention_as_cache` and `grave_cache`: the learnt attention used like a neural cache,
  `(1 - lambda) p_vocab + lambda r`, against Grave et al.'s (2017) untrained cache
  `p_cache(w) ∝ sum_{i < t, x_{i+1} = w} exp(theta h_t . h_i)` on the same hidden states and the
  same window, each at its best `lambda` (and `theta`) on the evaluated text. A learnt pointer
  should be at least as good a cache as the dot product of raw states.
- `query_constancy`: `||E q||^2 / E ||q||^2` over the text's positions: 1 when the query is the
  same vector everywhere (an attention that cannot depend on the position), near 0 when it varies.
- `weights`: the norm of each pointer weight (`query_kernel`, `query_bias`, `sentinel`) and, given
  its initial value (a training run keeps it in `initial_pointer.npz`), its initial norm and the
  relative distance moved `||w - w0|| / ||w0||`.
"""

import io
import math
import zipfile

import numpy as np
from keras import ops

from psmm_tf import workdir as run_files
from psmm_tf.compiled import inference_function
from psmm_tf.data.windows import iter_evaluation_windows
from psmm_tf.evaluation.analysis import target_in_window
from psmm_tf.layers import PointerSentinel, neural_cache, pointer_mass, vocab_log_prob

DEFAULT_THETAS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
DEFAULT_LAMBDAS = tuple(np.round(np.arange(0.0, 0.91, 0.05), 2))
_GATE_OFFSETS = np.arange(-10.0, 10.0001, 0.05)
_TINY = 1e-30
POINTER_WEIGHTS = PointerSentinel.WEIGHT_NAMES


def has_sentinel_pointer(model):
    """Whether `model` has a `PointerSentinel` head (`model.pointer` with a sentinel)."""
    return hasattr(getattr(model, "pointer", None), "sentinel")


def collect_pointer_records(model, ids, length=100, thetas=DEFAULT_THETAS, spelling=None):
    """One exact pass (batch 1, state and memory carried) keeping what the diagnostics need.

    Args:
        model: a `PointerSentinelLM` (any `LanguageModel` with `pointer`, `attention`, `gate`).
        ids: int `(N,)`. The text.
        length: int. Window length of a step (speed only).
        thetas: the Grave cache flatness values to score.
        spelling: optional `Spelling` of `ids` (a model with character inputs).

    Returns:
        dict of per-target float64 arrays `(N - 1,)` in text order: `vocab_log_prob`,
        `log_prob` (the mixture), `gate`, `pointer_mass` (attention on the target's word),
        `cache_prob` `(G, N - 1)` (Grave cache on the same states, window `L`), `has_history`
        (bool), `in_window` (bool); and `query_sum` `(D,)`, `query_square_sum` (float) over
        the positions; `thetas`.
    """
    if not has_sentinel_pointer(model):
        raise ValueError("Pointer diagnostics need a model with a sentinel pointer (kind "
                         f"'psmm'), got {type(model).__name__}.")
    ids = np.asarray(ids)
    window = model.window_size
    thetas_array = np.asarray(thetas, np.float32)
    step = inference_function(
        model, lambda batch, state, memory, cache: _diagnostic_step(
            model, batch, state, memory, cache, thetas_array, window))
    state, memory = model.zero_state(1), model.empty_memory(1)
    cache = neural_cache.empty_cache(1, window, model.hidden_dim)
    parts = {key: [] for key in ("vocab_log_prob", "log_prob", "gate", "pointer_mass",
                                 "cache_prob", "has_history")}
    query_sum, query_square_sum = np.zeros(model.hidden_dim), 0.0
    for batch in iter_evaluation_windows(ids, batch_size=1, length=length, spelling=spelling):
        out, state, memory, cache = step(batch, state, memory, cache)
        valid = batch["target_weights"][0] > 0
        for key in parts:
            value = ops.convert_to_numpy(out[key])
            parts[key].append(value[..., 0, :][..., valid])
        query = ops.convert_to_numpy(out["query"])[0][valid].astype(np.float64)
        query_sum += query.sum(axis=0)
        query_square_sum += float(np.sum(query * query))
    records = {key: np.concatenate(value, axis=-1).astype(np.float64)
               for key, value in parts.items()}
    records["has_history"] = records["has_history"].astype(bool)
    records["in_window"] = target_in_window(ids, window)
    records.update(query_sum=query_sum, query_square_sum=query_square_sum,
                   thetas=np.asarray(thetas, np.float64))
    return records


def _diagnostic_step(model, batch, state, memory, cache, thetas, window):
    valid = batch["target_weights"] > 0
    scores, outputs = model.score_step(batch["token_ids"], batch["targets"],
                                       batch["token_mask"], state, memory, target_mask=valid,
                                       token_chars=batch.get("token_chars"))
    mask = batch["token_mask"]
    targets = ops.where(valid, batch["targets"], 0)
    query = model.pointer.query(outputs["hidden"])
    keys = neural_cache.cache_keys(cache, outputs["hidden"], targets, mask)
    cache_prob, has_history = neural_cache.cache_target_probs(
        outputs["hidden"], keys, targets, thetas, window)
    out = {
        "vocab_log_prob": vocab_log_prob(outputs["vocab_logits"], targets),
        "log_prob": scores["log_probs"],
        "gate": scores["gate"],
        "pointer_mass": pointer_mass(outputs["attention"], outputs["key_ids"], targets),
        "cache_prob": cache_prob,
        "has_history": has_history,
        "query": query,
    }
    return out, outputs["state"], outputs["memory"], neural_cache.updated_cache(keys, window)


def pointer_statistics(records, lambdas=DEFAULT_LAMBDAS):
    """The diagnostics of the module docstring from `collect_pointer_records`' output.

    Returns:
        dict of floats (and the best `lambda`/`theta` of the two caches); log perplexities are
        mean negative log-likelihoods in nats per target.
    """
    gate = np.clip(records["gate"], 0.0, 1.0)
    mass = records["pointer_mass"]
    in_window = records["in_window"]
    pointer_share = np.maximum(1.0 - gate, _TINY)
    logit, p_vocab, r = mixture_parts(records)
    num = len(gate)

    def mean(values, where):
        return float(values[where].mean()) if where.any() else math.nan

    offset, offset_gain = _best_gate_offset(logit, p_vocab, r, -records["log_prob"])
    lambdas = np.asarray(lambdas, np.float64)
    attention_nll = _fixed_lambda_nll(p_vocab, r[None], lambdas, records["has_history"])  # [Λ]
    cache_nll = np.stack([_fixed_lambda_nll(p_vocab, records["cache_prob"][g][None], lambdas,
                                       records["has_history"])
                          for g in range(len(records["thetas"]))])  # [G, Λ]
    best_theta, best_lambda = np.unravel_index(np.argmin(cache_nll), cache_nll.shape)
    vocab_nll = float(-records["vocab_log_prob"].mean())
    model_nll = float(-records["log_prob"].mean())
    square = records["query_square_sum"] / num
    return {
        "num_targets": num,
        "fraction_in_window": float(in_window.mean()),
        "mean_gate": float(gate.mean()),
        "gate_target_in_window": mean(gate, in_window),
        "gate_target_not_in_window": mean(gate, ~in_window),
        "pointer_precision": float(mass.sum() / pointer_share.sum()),
        "pointer_precision_in_window": float(mass[in_window].sum()
                                             / pointer_share[in_window].sum())
        if in_window.any() else math.nan,
        "gate_offset": offset,
        "gate_offset_log_ppl_gain": offset_gain,
        "model_log_ppl": model_nll,
        "vocab_only_log_ppl": vocab_nll,
        "attention_as_cache": {
            "log_ppl": float(attention_nll.min()),
            "lambda": float(lambdas[np.argmin(attention_nll)]),
        },
        "grave_cache": {
            "log_ppl": float(cache_nll.min()),
            "theta": float(records["thetas"][best_theta]),
            "lambda": float(lambdas[best_lambda]),
        },
        "query_constancy": float(np.sum((records["query_sum"] / num) ** 2) / max(square, _TINY)),
    }


def _fixed_lambda_nll(p_vocab, other, lambdas, has_history):
    """Mean -log((1 - lambda) p_vocab + lambda other) for each lambda (p_vocab alone where a
    position has no history)."""
    mixed = (1.0 - lambdas[:, None]) * p_vocab[None] + lambdas[:, None] * other
    mixed = np.where(has_history[None], mixed, p_vocab[None])
    return -np.mean(np.log(np.maximum(mixed, _TINY)), axis=1)


def mixture_parts(records):
    """`(logit, p_vocab, r)` per target, float64 `(N,)`: the gate's logit, the softmax's
    probability of the target and the pointer's own (eq. 3's `p_ptr / (1 - g)`), so that the
    model's probability is `sigmoid(logit) p_vocab + (1 - sigmoid(logit)) r`."""
    gate = np.clip(records["gate"], 0.0, 1.0)
    pointer_share = np.maximum(1.0 - gate, _TINY)
    mass = records["pointer_mass"]
    # Clipped at 1: where 1 - g underflows, float32 round-off can make the ratio exceed it.
    r = np.clip(np.where(mass > 0, mass / pointer_share, 0.0), 0.0, 1.0)
    logit = np.log(np.maximum(gate, _TINY)) - np.log(pointer_share)
    return logit, np.exp(records["vocab_log_prob"]), r


def gated_mixture_nll(logit, p_vocab, r, scale=1.0, bias=0.0):
    """Mean `-log(g' p_vocab + (1 - g') r)` with `g' = sigmoid(scale * logit + bias)`.

    Args:
        logit, p_vocab, r: float arrays `(N,)` from `mixture_parts`.
        scale, bias: floats: a calibration of the gate's logit (1, 0: the gate as recorded).
    """
    gate = 1.0 / (1.0 + np.exp(-(scale * logit + bias)))
    return float(-np.mean(np.log(np.maximum(gate * p_vocab + (1.0 - gate) * r, _TINY))))


def _best_gate_offset(logit, p_vocab, r, model_nll):
    """The gate-logit offset of lowest mean NLL on a grid, and the NLL it saves."""
    best, best_nll = 0.0, float(np.mean(model_nll))
    for offset in _GATE_OFFSETS:
        nll = gated_mixture_nll(logit, p_vocab, r, bias=offset)
        if nll < best_nll - 1e-12:
            best, best_nll = float(offset), nll
    return best, float(np.mean(model_nll)) - best_nll


def pointer_weights(model):
    """The pointer's weights as NumPy arrays: name -> array, for `POINTER_WEIGHTS`."""
    return {name: ops.convert_to_numpy(getattr(model.pointer, name)) for name in POINTER_WEIGHTS}


def save_initial_pointer_weights(model, path):
    """Writes `pointer_weights(model)` to an `.npz` file (a run's starting point), atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, **pointer_weights(model))
    run_files.write_bytes_atomic(path, buffer.getvalue())


def load_initial_pointer_weights(path):
    """The weights `save_initial_pointer_weights` wrote, or None where `path` does not exist.

    Raises:
        ValueError: `path` exists but is not such a file (cut, edited); the message names it.
    """
    try:
        with np.load(path) as stored:
            weights = {name: stored[name] for name in stored.files}
        problem = f": it lacks {sorted(set(POINTER_WEIGHTS) - set(weights))}"
    except FileNotFoundError:
        return None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        weights, problem = None, f" ({type(err).__name__}: {err})"
    if weights is None or not set(POINTER_WEIGHTS) <= set(weights):
        raise ValueError(f"{path} is not the pointer's initial weights{problem}; restore it, or "
                         f"remove it (the pointer diagnostics then leave out how far the "
                         f"weights moved).")
    return weights


def weight_statistics(model, initial_weights=None):
    """Norms of the pointer's weights, and how far each moved from `initial_weights`.

    Args:
        model: a model with a `PointerSentinel` head.
        initial_weights: optional dict name -> array (`pointer_weights` of the model as
            initialised, e.g. from `load_initial_pointer_weights`).

    Returns:
        dict name -> dict with `norm`, and given `initial_weights`, `initial_norm` and
        `relative_change` (`||w - w0|| / ||w0||`, or `||w||` where `w0` is zero).
    """
    result = {}
    for name, value in pointer_weights(model).items():
        value = value.astype(np.float64)
        entry = {"norm": float(np.linalg.norm(value))}
        if initial_weights is not None:
            start = np.asarray(initial_weights[name], np.float64)
            start_norm = float(np.linalg.norm(start))
            entry["initial_norm"] = start_norm
            entry["relative_change"] = float(np.linalg.norm(value - start)
                                             / (start_norm if start_norm > 0 else 1.0))
        result[name] = entry
    return result


def pointer_diagnostics(model, ids, initial_weights=None, length=100, thetas=DEFAULT_THETAS,
                        lambdas=DEFAULT_LAMBDAS, spelling=None):
    """`pointer_statistics` of `model` on `ids`, with `weights` from `weight_statistics`;
    `spelling`: the `Spelling` of `ids` for a model with character inputs."""
    records = collect_pointer_records(model, ids, length=length, thetas=thetas,
                                      spelling=spelling)
    return diagnostics_from_records(records, model, initial_weights, lambdas)


def diagnostics_from_records(records, model, initial_weights=None, lambdas=DEFAULT_LAMBDAS):
    """`pointer_diagnostics` from records already collected on `model`."""
    result = pointer_statistics(records, lambdas)
    result["weights"] = weight_statistics(model, initial_weights)
    return result


def format_pointer_diagnostics(diagnostics):
    """Lines for a terminal: the numbers of `pointer_diagnostics` with what they mean."""
    d = diagnostics
    lines = [
        f"gate: {d['gate_target_in_window']:.3f} when the target is in the window, "
        f"{d['gate_target_not_in_window']:.3f} when not ({d['fraction_in_window']:.1%} in it)",
        f"pointer precision: {d['pointer_precision']:.3f} of the pointer's mass on the target "
        f"({d['pointer_precision_in_window']:.3f} when it is in the window)",
        f"gate offset: {d['gate_offset']:+.2f} on the gate's logit would save "
        f"{d['gate_offset_log_ppl_gain']:.4f} nats/target",
        f"log ppl: model {d['model_log_ppl']:.4f}, softmax alone {d['vocab_only_log_ppl']:.4f}, "
        f"attention as a cache {d['attention_as_cache']['log_ppl']:.4f} "
        f"(lambda {d['attention_as_cache']['lambda']:.2f}), Grave cache "
        f"{d['grave_cache']['log_ppl']:.4f} (theta {d['grave_cache']['theta']:.2f}, "
        f"lambda {d['grave_cache']['lambda']:.2f})",
        f"query constancy ||E q||^2 / E||q||^2: {d['query_constancy']:.3f} (1: constant)",
    ]
    for name, entry in d["weights"].items():
        moved = (f", initial {entry['initial_norm']:.3f}, moved {entry['relative_change']:.1%}"
                 if "initial_norm" in entry else "")
        lines.append(f"{name}: norm {entry['norm']:.3f}{moved}")
    return lines
