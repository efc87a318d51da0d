"""Where the pointer helps: word-frequency buckets (the paper's Figure 4) and gate statistics.

Figure 4 of Merity et al. (2016) plots, for words sorted by training frequency and split into 10
equal-size buckets (frequent words first), the mean difference in log perplexity between the
LSTM and the pointer sentinel-LSTM: positive where the pointer model is better, largest for rare
words. Here a bucket's log perplexity is the mean negative log-likelihood of the evaluation
targets whose word falls in it.
"""

import numpy as np


def frequency_buckets(train_counts, num_buckets=10, by="types"):
    """The frequency bucket (0 = most frequent) of every vocabulary id.

    Args:
        train_counts: int `(vocab_size,)`. Training count of each id.
        num_buckets: int. Number of buckets (paper: 10).
        by: "types": each bucket holds the same number of word types (ids sorted by count,
            ties by id); "tokens": each holds about the same share of the training tokens.

    Returns:
        int `(vocab_size,)`, values in [0, num_buckets).

    Raises:
        ValueError: `num_buckets` is not in [1, vocab_size], or `by` is neither.
    """
    counts = np.asarray(train_counts, np.int64)
    if not 1 <= num_buckets <= len(counts):
        raise ValueError(f"num_buckets={num_buckets}: expected 1 to the {len(counts)} words of "
                         f"the vocabulary (paper: 10).")
    order = np.lexsort((np.arange(len(counts)), -counts))  # count descending, then id
    bucket_of = np.empty(len(counts), np.int64)
    if by == "types":
        for bucket, ids in enumerate(np.array_split(order, num_buckets)):
            bucket_of[ids] = bucket
    elif by == "tokens":
        before = np.cumsum(counts[order]) - counts[order]  # training tokens of more frequent ids
        share = before / max(int(counts.sum()), 1)
        bucket_of[order] = np.minimum((share * num_buckets).astype(np.int64), num_buckets - 1)
    else:
        raise ValueError(f"by must be 'types' or 'tokens', got {by!r}.")
    return bucket_of


def bucket_comparison(targets, nll_model, nll_baseline, bucket_of, train_counts,
                      num_buckets=10):
    """Per-bucket mean log perplexity of two models and their difference (Figure 4).

    Args:
        targets: int `(N,)`. The evaluation targets.
        nll_model, nll_baseline: float `(N,)`. -log p of each target under the two models.
        bucket_of: int `(vocab_size,)` from `frequency_buckets`.
        train_counts: int `(vocab_size,)`. For the count range of each bucket.
        num_buckets: int.

    Returns:
        list of dicts, one per bucket: `bucket`, `num_targets`, `min_count`, `max_count`
        (training counts of its words), `model_log_ppl`, `baseline_log_ppl` (mean NLLs) and
        `mean_difference` = baseline - model (positive: the model is better).
    """
    targets = np.asarray(targets)
    nll_model = np.asarray(nll_model, np.float64)
    nll_baseline = np.asarray(nll_baseline, np.float64)
    diff = nll_baseline - nll_model
    target_bucket = bucket_of[targets]
    counts = np.asarray(train_counts)
    rows = []
    for bucket in range(num_buckets):
        words = np.nonzero(bucket_of == bucket)[0]
        hit = target_bucket == bucket
        n = int(hit.sum())
        rows.append({
            "bucket": bucket,
            "num_targets": n,
            "min_count": int(counts[words].min()) if len(words) else 0,
            "max_count": int(counts[words].max()) if len(words) else 0,
            "model_log_ppl": float(np.mean(nll_model[hit])) if n else float("nan"),
            "baseline_log_ppl": float(np.mean(nll_baseline[hit])) if n else float("nan"),
            "mean_difference": float(np.mean(diff[hit])) if n else float("nan"),
        })
    return rows


def target_in_window(ids, window_size):
    """Whether each target `ids[j + 1]` occurs among the inputs `ids[j - L + 1 .. j]`.

    That is whether the pointer can copy it (eq. 3's sum is over this window).

    Returns:
        bool `(len(ids) - 1,)`.
    """
    ids = np.asarray(ids)
    last_seen = {}
    found = np.zeros(len(ids) - 1, bool)
    for j in range(len(ids) - 1):
        last_seen[int(ids[j])] = j
        seen = last_seen.get(int(ids[j + 1]))
        found[j] = seen is not None and j - seen < window_size
    return found


def gate_statistics(gate, targets, in_window, bucket_of, num_buckets=10):
    """Summary of the sentinel gate g (the softmax's share; 1 - g goes to the pointer).

    Returns:
        dict: `mean`, `median`, `fraction_below_half` (targets where the pointer has most of
        the mass), `mean_target_in_window` / `mean_target_not_in_window`, `fraction_in_window`,
        and `mean_by_bucket` (list over frequency buckets, most frequent first).
    """
    gate = np.asarray(gate, np.float64)
    target_bucket = bucket_of[np.asarray(targets)]

    def mean(mask):
        return float(gate[mask].mean()) if mask.any() else float("nan")

    return {
        "mean": float(gate.mean()),
        "median": float(np.median(gate)),
        "fraction_below_half": float((gate < 0.5).mean()),
        "fraction_in_window": float(np.mean(in_window)),
        "mean_target_in_window": mean(in_window),
        "mean_target_not_in_window": mean(~in_window),
        "mean_by_bucket": [mean(target_bucket == b) for b in range(num_buckets)],
    }


def format_bucket_table(rows, model_name="psmm", baseline_name="lstm"):
    """A Markdown table of `bucket_comparison` rows."""
    lines = [
        f"| bucket | training counts | targets | {baseline_name} log ppl | {model_name} log ppl "
        f"| mean difference ({baseline_name} - {model_name}) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['bucket'] + 1} | {r['min_count']}-{r['max_count']} | {r['num_targets']} | "
            f"{r['baseline_log_ppl']:.3f} | {r['model_log_ppl']:.3f} | "
            f"{r['mean_difference']:+.3f} |")
    return "\n".join(lines) + "\n"


PLOTS_MISSING = ("the Figure 4 chart needs matplotlib, an optional dependency of psmm_tf: "
                 "pip install 'psmm_tf[plots]'")


def require_matplotlib():
    """Raises ImportError naming the `plots` extra where matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise ImportError(PLOTS_MISSING) from err


def plot_buckets(rows, path, model_name="psmm", baseline_name="lstm"):
    """Bar chart of the per-bucket mean difference in log perplexity (Figure 4), PNG or SVG.

    Raises:
        ImportError: matplotlib is missing (the message names the `plots` extra).
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    values = [r["mean_difference"] for r in rows]
    figure, axes = plt.subplots(figsize=(7, 3.5))
    axes.bar([r["bucket"] + 1 for r in rows], values, color="#1f77b4")
    axes.axhline(0.0, color="black", linewidth=0.8)
    axes.set_xticks([r["bucket"] + 1 for r in rows])
    axes.set_xlabel("word frequency bucket (1 = most frequent)")
    axes.set_ylabel(f"mean log ppl {baseline_name} - {model_name}")
    axes.set_title("Mean difference in log perplexity by word frequency")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
