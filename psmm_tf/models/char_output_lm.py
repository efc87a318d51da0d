"""A trained word-level model, frozen, whose next word is spelled by a character LSTM.

Jozefowicz et al. (2016), "Char LSTM Predictions": the word model's hidden state `h_t`
conditions `CharacterLSTMOutput`, which gives any word `w` a probability `p_char(w | h_t)`,
inside the vocabulary or not. With a pointer sentinel model underneath, the pointer keeps its
part (eq. 3 with the character LSTM in the softmax's place):

    p(w) = g_t p_char(w | h_t) + sum_{i: x_i = w} a_i

where a window word matches as itself (its row of the corpus's spelling table, not its id), so
a word outside the vocabulary seen in the window gets the pointer's mass instead of `<unk>`'s.
"""

import keras
from keras import ops

from psmm_tf.layers import CharacterLSTMOutput, mixture_log_prob_from_vocab


@keras.saving.register_keras_serializable(package="psmm_tf")
class CharacterOutputLM(keras.Model):
    """Wraps a trained `LanguageModel`, frozen, with a character-LSTM output layer.

    Only the output layer is trained (the paper trains it on a frozen word-level model). The
    wrapped model always runs in inference mode.

    Args:
        base_model: a trained `psmm_tf.models.LanguageModel`; it is frozen.
        units, max_word_length, char_embedding_dim, dropout, char_dropout, seed: of the
            `CharacterLSTMOutput` layer.

    Call arguments:
        token_ids: int `(batch_size, T)`, the input words' ids in the base model's vocabulary.
        target_chars: int `(batch_size, T, max_word_length)`, the spelling of each next word
            (`psmm_tf.data.spelling.word_characters`).
        token_mask, state, memory, token_chars: as for the base model.
        training: bool. Dropout of the output layer (the base model never trains).

    Returns:
        The base model's outputs (`hidden`, `state`, `memory`, `vocab_logits`, and with a
        pointer `attention`, `gate`, `key_ids`) and `word_log_prob`, float32
        `(batch_size, T)`: `log p_char(target | h_t)`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.data.spelling import word_characters
    from psmm_tf.models import CharacterOutputLM, LSTMBackbone, PointerSentinelLM

    backbone = LSTMBackbone(vocab_size=50, embedding_dim=16, hidden_dim=16, num_layers=1)
    trained = PointerSentinelLM(backbone, window_size=10)   # in practice: a trained model
    model = CharacterOutputLM(trained, units=32, max_word_length=12)
    ids = np.random.default_rng(0).integers(0, 50, size=(2, 5)).astype("int32")
    targets = word_characters(["a", "bb", "c", "dd", "e"] * 2, 12).reshape(2, 5, 12)
    outputs = model(ids, targets)
    outputs["word_log_prob"].shape   # (2, 5)
    ```
    """

    def __init__(self, base_model, units=256, max_word_length=32, char_embedding_dim=16,
                 dropout=0.25, char_dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(base_model, dict):
            base_model = keras.saving.deserialize_keras_object(base_model)
        self.base_model = base_model
        self.base_model.trainable = False
        self.dtype_policy = base_model.dtype_policy
        # In float32 whatever the base model's policy: it is small, and trains without a loss
        # scale (a float16 gradient of a character log-probability can underflow).
        self.char_output = CharacterLSTMOutput(
            units, max_word_length=max_word_length, char_embedding_dim=char_embedding_dim,
            dropout=dropout, char_dropout=char_dropout, seed=seed, name="char_output",
            dtype="float32")
        self.char_output.build((None, base_model.hidden_dim))
        self.built = True

    max_word_length = property(lambda self: self.char_output.max_word_length)
    has_pointer = property(lambda self: getattr(self.base_model, "has_pointer", False))

    def zero_state(self, batch_size):
        return self.base_model.zero_state(batch_size)

    def empty_memory(self, batch_size):
        return self.base_model.empty_memory(batch_size)

    def call(self, token_ids, target_chars, token_mask=None, state=None, memory=None,
             training=False, token_chars=None):
        outputs = dict(self.base_model(token_ids, token_mask=token_mask, state=state,
                                       memory=memory, training=False, token_chars=token_chars))
        hidden = ops.stop_gradient(outputs["hidden"])
        outputs["word_log_prob"] = self.char_output(hidden, target_chars, training=training)
        return outputs

    def open_vocabulary_log_prob(self, outputs, key_words, target_words):
        """`log p(target)` over an open vocabulary: the character LSTM's, mixed with the
        pointer's mass on the window's keys holding the same word when the base model has a
        pointer (see the module docstring).

        Args:
            outputs: this model's call outputs.
            key_words: int `(batch_size, K)`, a word identity (e.g. its row of a
                `psmm_tf.data.spelling.Spelling` table, equal for equal spellings) of each of
                the pointer's keys (`outputs["key_ids"]`' positions).
            target_words: int `(batch_size, T)`, the same identities of the targets.

        Returns:
            float32 `(batch_size, T)`.
        """
        if not self.has_pointer:
            return outputs["word_log_prob"]
        return mixture_log_prob_from_vocab(outputs["word_log_prob"], outputs["attention"],
                                           outputs["gate"], key_words, target_words)

    def get_config(self):
        config = super().get_config()
        layer = self.char_output
        config.update({"base_model": keras.saving.serialize_keras_object(self.base_model),
                       "units": layer.units, "max_word_length": layer.max_word_length,
                       "char_embedding_dim": layer.char_embedding_dim,
                       "dropout": layer.dropout, "char_dropout": layer.char_dropout,
                       "seed": layer.seed})
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
