"""psmm_tf: pointer sentinel mixture language models in TensorFlow/Keras.

Subpackages: `layers` (the pointer, mixture ops, LSTM parts), `losses`, `models`, `data`,
`training`, `configs`; the command-line programs in `trainers` (psmm-train, psmm-evaluate) and
`export` (psmm-export, psmm-score, the serving module), with `cli` their shared flag handling.
`__version__` is the package version (setup.py reads it from here).
"""

__version__ = "0.1.0"
