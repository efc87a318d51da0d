"""Keras layers and mixture ops of the pointer sentinel mixture model and its relatives."""

from psmm_tf.layers.char_cnn import CharacterEmbedding
from psmm_tf.layers.char_lstm_output import CharacterLSTMOutput
from psmm_tf.layers.cnn_softmax import CNNSoftmax
from psmm_tf.layers.dense import Dense
from psmm_tf.layers.input_output_gate import InputOutputGate
from psmm_tf.layers.locked_dropout import LockedDropout
from psmm_tf.layers.mixture import (
    checked_ids,
    mixture_distribution,
    mixture_log_prob,
    mixture_log_prob_from_vocab,
    pointer_loss,
    pointer_mass,
    vocab_log_prob,
)
from psmm_tf.layers.mixture_layer import PointerSentinelMixture
from psmm_tf.layers.pointer_sentinel import PointerSentinel, WindowedAttention, window_band
from psmm_tf.layers.pointer_softmax import PointerSoftmax
from psmm_tf.layers.sampled_softmax import SampledSoftmax
from psmm_tf.layers.zoneout_lstm import ZoneoutLSTM

__all__ = [
    "CNNSoftmax",
    "CharacterEmbedding",
    "CharacterLSTMOutput",
    "Dense",
    "SampledSoftmax",
    "InputOutputGate",
    "LockedDropout",
    "PointerSentinel",
    "PointerSentinelMixture",
    "PointerSoftmax",
    "WindowedAttention",
    "ZoneoutLSTM",
    "mixture_distribution",
    "mixture_log_prob",
    "mixture_log_prob_from_vocab",
    "pointer_loss",
    "pointer_mass",
    "vocab_log_prob",
    "window_band",
    "checked_ids",
]
