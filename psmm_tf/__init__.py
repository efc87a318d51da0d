"""psmm_tf: pointer sentinel mixture language models in TensorFlow/Keras.

Subpackages: `native` (optional native CPU kernels of the training step, one switch:
`psmm_tf.native.configure`), `layers` (the pointer, mixture ops, LSTM parts), `losses`,
`models`, `data`, `training`, `evaluation` (exact perplexity, the neural cache, reports),
`configs`; the command-line programs in `trainers` (psmm-train, psmm-evaluate) and `export`
(psmm-export, psmm-score, the serving module), with `cli` their shared flag handling.
`__version__` is the package version (setup.py reads it from here). Importing `psmm_tf`
registers every serialisable class with Keras.
"""

__version__ = "0.2.0"

import os as _os  # noqa: E402
import sys as _sys  # noqa: E402

from psmm_tf import native_logs as _native_logs  # noqa: E402

# The command-line programs keep TensorFlow's C++ log lines (CUDA probing, oneDNN notices) off
# the user's terminal, unless the user sets TF_CPP_MIN_LOG_LEVEL; before TensorFlow loads.
if _native_logs.wanted_for(_sys.argv[0] if _sys.argv else "", _os.environ):
    _native_logs.hide_native_log_lines()

# Importing the package registers every serialisable class (layers, losses, models, the
# tokenizer and the preprocessor) with Keras, so `keras.saving.load_model(path)` works after
# `import psmm_tf` on any backend, with safe_mode on; `psmm_tf.configs` holds the presets.
from psmm_tf import configs, layers, losses, models, native  # noqa: E402,F401
