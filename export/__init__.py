"""Export and serving of trained psmm_tf language models (DESIGN.md section 5).

- `export.serving_module.ServingModule`: the `tf.Module` with the named signatures, for a
  language model, an `InputOutputGateLM` or a `NeuralCache` over either.
- `export.cache`: the neural cache (Grave et al. 2017) in the serving graph.
- `export.export_saved_model`: `psmm-export`, checkpoint + vocabulary -> `<base>/<version>/`.
- `export.score`: `psmm-score`, scores text with an export, locally or through TF Serving.

This package file imports nothing heavy: `export.score` and `export.clients` run where only
TensorFlow is installed (no psmm_tf), as a serving client would.
"""

# The carried state of the stream signatures, inputs and outputs under the same names.
STATE_NAMES = ("lstm_state", "memory_hidden", "memory_ids", "memory_mask", "last_id")
# The neural cache's carried state, added to STATE_NAMES by exports with a cache.
CACHE_STATE_NAMES = ("cache_hidden", "cache_ids", "cache_mask")
