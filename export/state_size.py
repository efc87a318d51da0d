"""The size of one stream's carried state: what a streaming client holds between requests.

The stream signatures (`score_text_stream`, `score_stream`) take and return the state of each
row (`psmm_tf.export.STATE_NAMES`): `lstm_state` float32 `(num_layers, 2, H)`, `memory_hidden`
float32 `(M, H)`, `memory_ids` int32 `(M,)`, `memory_mask` bool `(M,)`, `last_id` int32 and
`vocabulary_fingerprint` int32, with `M = window_size - 1`; an export with a neural cache adds
`cache_hidden` float32 `(W, H)`, `cache_ids` int32 `(W,)` and `cache_mask` bool `(W,)`.
docs/serving.md holds the table of `state_size_table()`.

```python
from psmm_tf import configs
from psmm_tf.export.state_size import streaming_state_bytes

streaming_state_bytes(configs.get_preset("medium").model)["total"]  # 268,303
```
"""

# Bytes of one element of each state dtype (as TensorProto / NumPy hold them).
_FLOAT32, _INT32, _BOOL = 4, 4, 1
PRESET_NAMES = ("tiny", "small", "medium", "large")


def streaming_state_bytes(model_config, cache_window=None):
    """Bytes of each state tensor of one stream, and their `total`.

    Args:
        model_config: `psmm_tf.configs.ModelConfig` (`num_layers`, `hidden_dim`, `window_size`).
        cache_window: optional int. `W` of an export with a neural cache.

    Returns:
        dict: state name -> bytes per stream, and `total`.
    """
    hidden, memory = model_config.hidden_dim, model_config.window_size - 1
    sizes = {
        "lstm_state": _FLOAT32 * model_config.num_layers * 2 * hidden,
        "memory_hidden": _FLOAT32 * memory * hidden,
        "memory_ids": _INT32 * memory,
        "memory_mask": _BOOL * memory,
        "last_id": _INT32,
        "vocabulary_fingerprint": _INT32,
    }
    if cache_window is not None:
        sizes.update(cache_hidden=_FLOAT32 * cache_window * hidden,
                     cache_ids=_INT32 * cache_window, cache_mask=_BOOL * cache_window)
    sizes["total"] = sum(sizes.values())
    return sizes


def state_size_table(preset_names=PRESET_NAMES):
    """The Markdown table of docs/serving.md: the state of one stream at each preset."""
    from psmm_tf import configs

    lines = ["| preset | layers x H | window L | lstm_state | memory (L-1 states, ids, mask) "
             "| last_id, fingerprint | bytes per stream |",
             "|---|---|---|---|---|---|---|"]
    for name in preset_names:
        model = configs.get_preset(name).model
        sizes = streaming_state_bytes(model)
        memory = sizes["memory_hidden"] + sizes["memory_ids"] + sizes["memory_mask"]
        ints = sizes["last_id"] + sizes["vocabulary_fingerprint"]
        lines.append(f"| {name} | {model.num_layers} x {model.hidden_dim} | "
                     f"{model.window_size} | {sizes['lstm_state']:,} | {memory:,} | "
                     f"{ints} | {sizes['total']:,} ({_human(sizes['total'])}) |")
    return "\n".join(lines)


def _human(size):
    """`size` bytes as KiB or MiB, one decimal."""
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB"


if __name__ == "__main__":
    print(state_size_table())
