"""Export and serving of trained psmm_tf language models (docs/serving.md).

- `psmm_tf.export.serving_module.ServingModule`: the `tf.Module` with the named signatures, for a
  language model, an `InputOutputGateLM` or a `NeuralCache` over either.
- `psmm_tf.export.cache`: the neural cache (Grave et al. 2017) in the serving graph.
- `psmm_tf.export.export_saved_model`: `psmm-export`, checkpoint + vocabulary ->
  `<base>/<version>/`.
- `psmm_tf.export.score`: `psmm-score`, scores text with an export, locally or through TF Serving.

This package file imports nothing heavy: `psmm_tf.export.score` and `psmm_tf.export.clients`
run where only TensorFlow and absl are installed (none of psmm_tf's model code is imported), as
a serving client would.
"""

# The carried state of the stream signatures, inputs and outputs under the same names
# (`vocabulary_fingerprint`: the export's, `psmm_tf.export.fingerprint`, in every row).
STATE_NAMES = ("lstm_state", "memory_hidden", "memory_ids", "memory_mask", "last_id",
               "vocabulary_fingerprint")
# The neural cache's carried state, added to STATE_NAMES by exports with a cache.
CACHE_STATE_NAMES = ("cache_hidden", "cache_ids", "cache_mask")
