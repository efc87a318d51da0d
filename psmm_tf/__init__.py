"""psmm_tf: pointer sentinel mixture language models in TensorFlow/Keras.

Subpackages: `layers` (the pointer, mixture ops, LSTM parts), `losses`, `models`, `data`,
`training`, `evaluation` (exact perplexity, the neural cache, reports), `configs`; the
command-line programs in `trainers` (psmm-train, psmm-evaluate) and `export` (psmm-export,
psmm-score, the serving module), with `cli` their shared flag handling.
`__version__` is the package version (setup.py reads it from here). Importing `psmm_tf`
registers every serialisable class with Keras.
"""

__version__ = "0.2.0.dev0"

# Importing the package registers every serialisable class (layers, losses, models, the
# tokenizer and the preprocessor) with Keras, so `keras.saving.load_model(path)` works after
# `import psmm_tf` on any backend, with safe_mode on; `psmm_tf.configs` holds the presets.
from psmm_tf import configs, layers, losses, models  # noqa: E402,F401
