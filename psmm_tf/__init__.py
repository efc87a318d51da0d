"""psmm_tf: pointer sentinel mixture language models in TensorFlow/Keras.

Subpackages: `layers` (the pointer, mixture ops, LSTM parts), `losses`, `models`, `data`,
`configs`. See DESIGN.md for the architecture and the contract of the core.
"""

__version__ = "0.1.0"
