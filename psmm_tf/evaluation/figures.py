"""An HTML page of pointer attention over the window, like the paper's Figures 5-12.

For each chosen target, the words of the pointer's window (paper eq. 5's L most recent inputs)
are shaded by their attention a_i, and the sentinel gate g (eq. 8: the vocabulary softmax's
share, 1 - g the pointer's) and the target's probability are printed beside it.
"""

import html

import numpy as np


def choose_positions(gate, in_window, count=8, seed=0):
    """Target indices worth showing: where the pointer took most mass, plus a few random ones.

    Args:
        gate: float `(N,)`. The gate at each target.
        in_window: bool `(N,)`. Whether the target occurs in the pointer's window.
        count: int. How many positions.
        seed: int. Seed of the random picks.

    Returns:
        Sorted list of ints: about three quarters the lowest-gate targets that the pointer could
        copy, the rest drawn at random.
    """
    gate = np.asarray(gate)
    candidates = np.nonzero(in_window)[0]
    lowest = candidates[np.argsort(gate[candidates], kind="stable")][: max(1, 3 * count // 4)]
    rest = np.setdiff1d(np.arange(len(gate)), lowest)
    rng = np.random.default_rng(seed)
    extra = rng.choice(rest, size=min(count - len(lowest), len(rest)), replace=False)
    return sorted(int(p) for p in np.concatenate([lowest, extra]))


def _shade(weight, scale):
    alpha = 0.0 if scale <= 0 else min(1.0, weight / scale)
    return f"background: rgba(31, 119, 180, {alpha:.3f})"


def render_attention_html(examples, title="Pointer attention"):
    """The HTML page of a list of examples.

    Args:
        examples: list of dicts with `position` (int target index), `words` (list of str: the
            window, oldest first), `weights` (float list: attention of each window word),
            `target` (str), `gate` (float) and `probability` (float: p(target) under the model).
        title: str.

    Returns:
        str. A self-contained HTML document.
    """
    parts = [
        "<!DOCTYPE html>",
        "<html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        ".example{margin:1.5em 0;padding:0.8em;border:1px solid #ccc;border-radius:4px}"
        ".w{padding:1px 2px;margin:1px;border-radius:2px;display:inline-block}"
        ".target{font-weight:bold;border:1px solid #d62728}"
        ".meta{color:#444;font-size:0.9em;margin-bottom:0.4em}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<p>Each word of the pointer's window is shaded by its attention (darkest = the largest "
        "weight of the example); hover a word for its value. The gate g is the vocabulary "
        "softmax's share of the mixture, 1 - g the pointer's.</p>",
    ]
    for example in examples:
        weights = np.asarray(example["weights"], np.float64)
        scale = float(weights.max()) if len(weights) else 0.0
        target = example["target"]
        pointer_mass = float(weights[[w == target for w in example["words"]]].sum()) if len(
            weights) else 0.0
        parts.append("<div class='example'>")
        parts.append(
            f"<div class='meta'>position {example['position']}: target "
            f"<b>{html.escape(target)}</b>, gate g = {example['gate']:.3f}, pointer mass on the "
            f"target = {pointer_mass:.3f}, p(target) = {example['probability']:.4f}</div>")
        spans = []
        for word, weight in zip(example["words"], weights, strict=True):
            css = "w target" if word == target else "w"
            spans.append(f"<span class='{css}' style='{_shade(weight, scale)}' "
                         f"title='{weight:.4f}'>{html.escape(word)}</span>")
        spans.append(f"&rarr; <span class='w target'>{html.escape(target)}</span>")
        parts.append(" ".join(spans))
        parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)
