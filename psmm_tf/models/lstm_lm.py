"""The softmax-only LSTM language model: the paper's baseline on the same backbone."""

import keras
import tensorflow as tf

from psmm_tf.layers import vocab_log_prob
from psmm_tf.models.language_model import LanguageModel


@keras.saving.register_keras_serializable(package="psmm_tf")
class LSTMLanguageModel(LanguageModel):
    """The zoneout + variational LSTM language model with a plain vocabulary softmax.

    The same backbone, windows, state and memory as `PointerSentinelLM` (the memory of hidden
    states is what a neural cache reads at evaluation), without the pointer. Train it with
    `keras.losses.SparseCategoricalCrossentropy(from_logits=True)` on `vocab_logits`.
    """

    def log_prob(self, outputs, targets):
        if "target_vocab_log_prob" in outputs:  # sampled softmax in training
            return outputs["target_vocab_log_prob"]
        return vocab_log_prob(outputs["vocab_logits"], targets)

    def distribution(self, outputs):
        return tf.nn.softmax(tf.cast(outputs["vocab_logits"], tf.float32), axis=-1)
