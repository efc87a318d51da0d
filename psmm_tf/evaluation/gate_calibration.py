"""Calibrating a trained sentinel's gate on held-out text (Platt scaling of its logit).

The gate `g = sigmoid(l)`, `l = q . s - log sum_i exp(z_i)` (paper eq. 7-8), is learnt on the
training text, and can be overconfident on new text: the mixture's held-out likelihood may be
better with `g' = sigmoid(scale * l + bias)`, `scale` below 1 (docs/results.md, "Quality at
`small`"). Both numbers are fitted here,
by the mixture's negative log-likelihood

    -log(g' p_vocab(y) + (1 - g') r(y)),

with the pointer's own distribution `r = sum_{i: x_i = y} a_i / (1 - g)` kept (eq. 3), on one
exact pass over the held-out text, and set on the model (`PointerSentinelLM.set_gate_calibration`),
which keeps them in its config (`.keras`, SavedModel exports). Only the mixing weight changes;
the attention's shape over the window, the softmax and every weight stay as trained.
"""

import numpy as np

from psmm_tf.evaluation import pointer_diagnostics

# Coarse grid, then a finer one around the best point: the NLL is smooth in (scale, bias) and
# a grid cannot diverge or stop at a saddle.
_COARSE_SCALES = np.arange(0.0, 2.0001, 0.1)
_COARSE_BIASES = np.arange(-8.0, 8.0001, 0.25)
_FINE_SCALES = np.arange(-0.1, 0.1001, 0.01)
_FINE_BIASES = np.arange(-0.25, 0.2501, 0.025)


def fit_gate_calibration(records):
    """The `(scale, bias)` of least mixture NLL on the records of one pass.

    Args:
        records: `pointer_diagnostics.collect_pointer_records` output (needs `gate`,
            `vocab_log_prob`, `pointer_mass`, `log_prob`).

    Returns:
        dict: `scale`, `bias` (applied to the logit of the gate in `records`), `num_targets`,
        `log_ppl_before` (the model's mean NLL) and `log_ppl_after` (with the fit), in nats per
        target.
    """
    logit, p_vocab, r = pointer_diagnostics.mixture_parts(records)
    if logit.size == 0:
        raise ValueError("Gate calibration needs at least one target.")

    def search(scales, biases, best):
        for scale in scales:
            if scale < 0.0:
                continue
            for bias in biases:
                nll = pointer_diagnostics.gated_mixture_nll(logit, p_vocab, r, scale, bias)
                if nll < best[0] - 1e-12:
                    best = (nll, float(scale), float(bias))
        return best

    best = search([1.0], [0.0], (np.inf, 1.0, 0.0))  # ties keep the gate as it is
    best = search(_COARSE_SCALES, _COARSE_BIASES, best)
    best = search(best[1] + _FINE_SCALES, best[2] + _FINE_BIASES, best)
    return {"scale": round(best[1], 4), "bias": round(best[2], 4),
            "num_targets": int(logit.size),
            "log_ppl_before": float(-np.mean(records["log_prob"])),
            "log_ppl_after": best[0]}


def compose(current, fitted):
    """The calibration that applies `current` (None or `(scale, bias)`) and then `fitted`."""
    scale, bias = (1.0, 0.0) if current is None else current
    return (fitted[0] * scale, fitted[0] * bias + fitted[1])


def calibrate_gate(model, ids, length=100, spelling=None):
    """Fits the gate of `model` on the text `ids` and sets the result on the model.

    Args:
        model: a `PointerSentinelLM`.
        ids: int `(N,)`, held-out text (a validation split; never the text it is scored on).
        length: int. Window length of the pass (speed only).
        spelling: optional `Spelling` of `ids` (a model with character inputs).

    Returns:
        As `calibrate_from_records`.
    """
    return calibrate_from_records(model, pointer_diagnostics.collect_pointer_records(
        model, ids, length=length, thetas=(1.0,), spelling=spelling))


def calibrate_from_records(model, records):
    """Fits the gate on records of one pass of `model` and sets the result on the model.

    A model that is already calibrated is calibrated again on top (the fit is on the gate it
    has), so the result is the calibration of the trained gate that fits the records' text.

    Returns:
        The `fit_gate_calibration` dict, with `gate_calibration`: the `[scale, bias]` now on
        the model (relative to the trained gate).
    """
    fit = fit_gate_calibration(records)
    calibration = compose(model.pointer.gate_calibration, (fit["scale"], fit["bias"]))
    model.set_gate_calibration(calibration)
    fit["gate_calibration"] = [round(value, 4) for value in calibration]
    return fit


def format_gate_calibration(fit, text="validation split"):
    """One line for a terminal."""
    scale, bias = fit["gate_calibration"]
    return (f"gate calibrated on the {text} ({fit['num_targets']} targets): logit x "
            f"{scale:.3f} {bias:+.3f}; log ppl {fit['log_ppl_before']:.4f} -> "
            f"{fit['log_ppl_after']:.4f} (ppl {np.exp(fit['log_ppl_before']):.2f} -> "
            f"{np.exp(fit['log_ppl_after']):.2f})")
