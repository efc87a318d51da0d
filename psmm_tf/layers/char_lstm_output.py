"""Words predicted one character at a time: Jozefowicz et al.'s "Char LSTM Predictions".

A word-level language model's hidden state `h` conditions a small LSTM that spells the next
word (its `word_characters` row: begin marker, UTF-8 bytes, end marker):

    z   = W_z h + b_z                                   conditioning, (..., units)
    s_k = LSTM(s_{k-1}, [E c_{k-1}; z])                 k = 1 .. n + 1, c_0 the begin marker
    p(c_k | c_<k, h) = softmax(U s_k + b)[c_k]          over the end marker and the 256 bytes
    log p(w | h) = sum_{k=1}^{n+1} log p(c_k | c_<k, h)  c_{n+1}: the end marker

Every spelling ends with the end marker, so no spelling is a prefix of another and the
probabilities of distinct words of at most `max_word_length - 2` bytes sum to at most 1, inside
the vocabulary or not. A longer word is scored by its first bytes and the end marker
(`word_characters`' truncation): words sharing that prefix share one probability, which
overstates each of them (no word of PTB or wiki.valid is over 30 bytes, the default's limit).

In training, `dropout` drops units of `h`, and `char_dropout` units of the character LSTM's
inputs `[E c_{k-1}; z]` and outputs `s_k`, one mask per word shared by all its characters
(`LockedDropout`, Gal and Ghahramani's variational dropout over the characters).
"""

import keras
from keras import ops

from psmm_tf.data.spelling import NUM_CHARACTER_IDS
from psmm_tf.layers import locked_dropout
from psmm_tf.layers.char_cnn import seeded_initializer
from psmm_tf.layers.dense import Dense
from psmm_tf.layers.locked_dropout import LockedDropout

# The spelling's padding and begin-marker ids (psmm_tf.data.spelling) are never predicted.
_PAD, _BEGIN = 0, 1
_NEVER = -1e9


@keras.saving.register_keras_serializable(package="psmm_tf")
class CharacterLSTMOutput(keras.layers.Layer):
    """Log-probability of a word given a word-level hidden state, spelled by a character LSTM.

    Args:
        units: int. Units of the character LSTM and width of the conditioning `z`.
        max_word_length: int W. Characters of a spelling, markers included.
        char_embedding_dim: int. Width of the character embedding `E`.
        dropout: float in [0, 1). Dropout on `h` in training.
        char_dropout: float in [0, 1). Dropout on the character LSTM's inputs and outputs in
            training, one mask per word across its characters.
        seed: optional int. Seed of the initialisers and dropout.

    Call arguments:
        hidden: float `(..., H)`, word-level hidden states.
        chars: int `(..., W')`, the spelling of the word each state predicts (`word_characters`
            rows of `max_word_length` characters, or their first `W'` columns where every
            spelling ends before: `trimmed_spellings`; an all-zero row, a position with no
            word, scores 0).
        training: bool. Dropout on `hidden` and, with `char_dropout`, on the character LSTM's
            inputs and outputs.

    Returns:
        float32 `(...)`: `log p(word | hidden)`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.data.spelling import word_characters
    from psmm_tf.layers.char_lstm_output import CharacterLSTMOutput

    layer = CharacterLSTMOutput(units=32, max_word_length=12)
    hidden = np.random.default_rng(0).normal(size=(2, 3, 16)).astype("float32")
    chars = word_characters(["the", "cat", "sat", "on", "a", "zyzzyva"], 12).reshape(2, 3, 12)
    log_probs = layer(hidden, chars)   # (2, 3)
    ```
    """

    def __init__(self, units, max_word_length=32, char_embedding_dim=16, dropout=0.0,
                 char_dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if max_word_length < 3:
            raise ValueError(f"max_word_length must be >= 3 (two markers and a byte), got "
                             f"{max_word_length!r}.")
        for name, rate in (("dropout", dropout), ("char_dropout", char_dropout)):
            if not 0.0 <= rate < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {rate!r}.")
        self.units = units
        self.max_word_length = max_word_length
        self.char_embedding_dim = char_embedding_dim
        self.dropout = dropout
        self.char_dropout = char_dropout
        self.seed = seed

        def init(default, offset):
            return seeded_initializer(default, seed, offset)

        policy = self.dtype_policy
        self.char_embedding = keras.layers.Embedding(
            NUM_CHARACTER_IDS, char_embedding_dim, name="char_embedding", dtype=policy,
            embeddings_initializer=init("RandomUniform", 0))
        self.conditioning = Dense(units, name="conditioning", dtype=policy,
                                  kernel_initializer=init("GlorotUniform", 1))
        self.lstm = keras.layers.LSTM(units, return_sequences=True, name="char_lstm",
                                      dtype=policy, kernel_initializer=init("GlorotUniform", 2),
                                      recurrent_initializer=init("Orthogonal", 3))
        self.char_logits = Dense(NUM_CHARACTER_IDS, name="char_logits", dtype=policy,
                                 kernel_initializer=init("GlorotUniform", 4))
        # Kept as a layer for its seed generator (saved with the model); it is applied through
        # locked_dropout.dropout, which masks 16-bit inputs as float32 ones.
        self.hidden_dropout = keras.layers.Dropout(dropout, seed=seed, dtype=policy)
        # Made only when used: a layer saved before char_dropout existed loads as it was.
        # Their seeds stay clear of the initialisers' (seed + 0..4): a generator seeded as an
        # initialiser would draw its first mask from the same numbers as that weight.
        if char_dropout:
            def locked(offset):
                return LockedDropout(char_dropout, seed=None if seed is None else seed + offset,
                                     dtype=policy)
            self.char_input_dropout = locked(101)
            self.char_state_dropout = locked(102)

    def build(self, hidden_shape=None, chars_shape=None):
        hidden_dim = None if hidden_shape is None else hidden_shape[-1]
        self.char_embedding.build((None, None))
        self.conditioning.build((None, hidden_dim))
        self.lstm.build((None, None, self.char_embedding_dim + self.units))
        self.char_logits.build((None, None, self.units))
        self.built = True

    def character_log_probs(self, hidden, chars, training=False):
        """Log-probabilities of the next character after each prefix of each spelling.

        Args: as the call's, `hidden` `(N, H)`, `chars` `(N, W')`.

        Returns:
            float32 `(N, W' - 1, NUM_CHARACTER_IDS)`: row `k` is the distribution of character
            `k + 1` given characters `0 .. k` (padding and the begin marker get none of it).
        """
        chars = ops.cast(chars, "int32")
        if training and self.dropout > 0.0:
            hidden = locked_dropout.dropout(hidden, self.dropout,
                                            self.hidden_dropout.seed_generator)
        z = self.conditioning(hidden)
        steps = ops.shape(chars)[1] - 1
        embedded = self.char_embedding(chars[:, :-1])
        z = ops.broadcast_to(z[:, None, :], (ops.shape(z)[0], steps, self.units))
        inputs = ops.concatenate([embedded, ops.cast(z, embedded.dtype)], -1)
        if self.char_dropout:
            inputs = self.char_input_dropout(inputs, training=training)
        states = self.lstm(inputs)
        if self.char_dropout:
            states = self.char_state_dropout(states, training=training)
        logits = ops.cast(self.char_logits(states), "float32")
        never = ops.arange(NUM_CHARACTER_IDS) < 2  # _PAD and _BEGIN
        logits = ops.where(never, ops.full_like(logits, _NEVER), logits)
        return ops.log_softmax(logits, axis=-1)

    def call(self, hidden, chars, training=False):
        leading, width = ops.shape(chars)[:-1], ops.shape(chars)[-1]
        chars = ops.reshape(ops.cast(chars, "int32"), (-1, width))
        hidden = ops.reshape(hidden, (-1, ops.shape(hidden)[-1]))
        log_probs = self.character_log_probs(hidden, chars, training=training)
        following = chars[:, 1:]
        picked = ops.take_along_axis(log_probs, following[:, :, None], axis=-1)[:, :, 0]
        # The characters after the begin marker up to the end marker; padding scores nothing.
        picked = ops.where(following != _PAD, picked, ops.zeros_like(picked))
        return ops.reshape(ops.sum(picked, axis=-1), leading)

    def compute_output_spec(self, hidden, chars, training=False):
        return keras.KerasTensor(chars.shape[:-1], dtype="float32")

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "max_word_length": self.max_word_length,
                       "char_embedding_dim": self.char_embedding_dim,
                       "dropout": self.dropout, "char_dropout": self.char_dropout,
                       "seed": self.seed})
        return config


def trimmed_spellings(chars, multiple=8):
    """`chars` (NumPy, `(..., W)`) without the padding columns no spelling reaches, kept to a
    multiple of `multiple` columns (few distinct shapes, few compiled functions): the character
    LSTM then runs as many steps as the longest word needs, not `W`."""
    longest = int((chars != _PAD).sum(-1).max()) if chars.size else 1
    width = min(chars.shape[-1], max(2, -(-longest // multiple) * multiple))
    return chars[..., :width]
