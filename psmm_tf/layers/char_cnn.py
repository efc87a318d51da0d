"""Words from their characters: Kim et al.'s character CNN, the one encoder of the package.

A word is spelled as UTF-8 bytes between begin and end markers (`word_characters`), embedded
per character, convolved with filters of several widths (tanh), max-pooled over the word, passed
through a highway layer and projected to the width the caller needs. `CNNSoftmax` uses it for
output embeddings (Jozefowicz et al. 2016, "CNN Softmax") and `CharacterEmbedding` for input
embeddings ("CNN inputs"), each with parameters of its own.
"""

import keras
from keras import ops

from psmm_tf.data.spelling import NUM_CHARACTER_IDS, word_characters
from psmm_tf.layers.dense import Dense
from psmm_tf.layers.mixture import checked_ids

DEFAULT_FILTERS = ((1, 32), (2, 64), (3, 128), (4, 128), (5, 128))


def seeded_initializer(name, seed, offset):
    """The Keras initialiser `name` seeded with `seed + offset`, or `name` itself (Keras'
    unseeded default) when `seed` is None: sub-layers of one seeded layer start apart."""
    return name if seed is None else keras.initializers.get(
        {"class_name": name, "config": {"seed": seed + offset}})


class CharacterCNN:
    """Mixin of a Keras layer that encodes words from their characters.

    `create_character_cnn` makes the sub-layers as attributes of the layer (`char_embedding`,
    `conv_<i>`, `highway_transform`, `highway_gate`, `projection`; the names its weights are
    saved under), `build_character_cnn` builds them and the `characters` weight (the spelling
    of the layer's `vocab_size` words, set by `set_vocabulary`), and `encode_characters`
    computes

        x = E[chars]                                  (..., W, char_embedding_dim)
        p = concat_k max_t tanh(conv_k(x))_t          (..., sum of filter counts)
        g = sigmoid(W_g p + b_g)
        y = g * relu(W_t p + b_t) + (1 - g) * p       (a highway layer)
        e = y P                                       (..., output_dim), no bias
    """

    def create_character_cnn(self, output_dim, max_word_length, char_embedding_dim, filters,
                             seed=None):
        """Creates the sub-layers under the layer's dtype policy; `seed` seeds their
        initialisers (None: Keras' unseeded defaults)."""
        self.max_word_length = max_word_length
        self.char_embedding_dim = char_embedding_dim
        self.filters = tuple(tuple(f) for f in filters)

        def init(default, offset):
            return seeded_initializer(default, seed, offset)

        policy = self.dtype_policy  # the sub-layers compute as the layer does
        self.char_embedding = keras.layers.Embedding(
            NUM_CHARACTER_IDS, char_embedding_dim, name="char_embedding",
            embeddings_initializer=init("RandomUniform", 0))
        # Attributes, not a list: TF's checkpoint does not see layers in Keras 3 lists.
        for i, (width, count) in enumerate(self.filters):
            setattr(self, f"conv_{i}", keras.layers.Conv1D(
                count, width, activation="tanh", name=f"conv_{width}", dtype=policy,
                kernel_initializer=init("GlorotUniform", 1 + i)))
        width = sum(count for _, count in self.filters)
        self.highway_transform = Dense(
            width, activation="relu", name="highway", dtype=policy,
            kernel_initializer=init("GlorotUniform", 20))
        self.highway_gate = Dense(
            width, activation="sigmoid", name="highway_gate", dtype=policy,
            kernel_initializer=init("GlorotUniform", 21))
        self.projection = Dense(
            output_dim, use_bias=False, name="projection", dtype=policy,
            kernel_initializer=init("GlorotUniform", 22))

    @property
    def convolutions(self):
        """One convolution per `(width, count)` of `filters`."""
        return [getattr(self, f"conv_{i}") for i in range(len(self.filters))]

    def build_character_cnn(self):
        self.characters = self.add_weight(
            name="characters", shape=(self.vocab_size, self.max_word_length), dtype="int32",
            initializer="zeros", trainable=False)
        self.char_embedding.build((None, None))
        for conv in self.convolutions:
            conv.build((None, self.max_word_length, self.char_embedding_dim))
        width = sum(count for _, count in self.filters)
        self.highway_transform.build((None, width))
        self.highway_gate.build((None, width))
        self.projection.build((None, width))

    def set_vocabulary(self, words):
        """Spells the vocabulary (a list of V strings, index = id) into the `characters`
        weight (building the layer first if it is not built)."""
        if not self.built:
            self.build()
        if len(words) != self.vocab_size:
            raise ValueError(f"set_vocabulary needs {self.vocab_size} words, got {len(words)}.")
        self.characters.assign(word_characters(words, self.max_word_length))

    def encode_characters(self, chars):
        """Word vectors `(..., output_dim)` of character ids `(..., max_word_length)`."""
        leading = ops.shape(chars)[:-1]
        x = self.char_embedding(ops.reshape(chars, (-1, self.max_word_length)))
        pooled = ops.concatenate([ops.max(conv(x), axis=1) for conv in self.convolutions], -1)
        gate = self.highway_gate(pooled)
        highway = gate * self.highway_transform(pooled) + (1.0 - gate) * pooled
        encoded = self.projection(highway)
        return ops.reshape(encoded, tuple(leading) + (ops.shape(encoded)[-1],))

    def character_cnn_config(self):
        return {"max_word_length": self.max_word_length,
                "char_embedding_dim": self.char_embedding_dim, "filters": self.filters}


@keras.saving.register_keras_serializable(package="psmm_tf")
class CharacterEmbedding(CharacterCNN, keras.layers.Layer):
    """Input word embeddings from characters: Jozefowicz et al.'s "CNN inputs" (Kim et al.).

    A word's embedding is the character CNN of its spelling (`CharacterCNN`), so a word outside
    the vocabulary, given its characters, gets an embedding of its own instead of `<unk>`'s.
    By default the spelling of each id comes from the vocabulary (`set_vocabulary`, a weight
    saved with the layer); `token_chars` gives the spelling of each position instead.

    Args:
        vocab_size: int. V, the ids `token_ids` may hold.
        output_dim: int. Width of the embedding.
        max_word_length: int. Characters kept per word, begin and end markers included.
        char_embedding_dim: int. Width of the character embedding.
        filters: sequence of `(width, count)` convolution filters.
        seed: optional int. Seed of the initialisers.

    Call arguments:
        token_ids: int `(batch_size, T)` in `[0, V)`.
        token_chars: optional int `(batch_size, T, max_word_length)` (`word_characters` rows):
            the spelling of each position, e.g. of the words `token_ids` holds as `<unk>`.

    Returns:
        float `(batch_size, T, output_dim)`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.layers import CharacterEmbedding
    from psmm_tf.data.spelling import word_characters

    embedding = CharacterEmbedding(vocab_size=3, output_dim=32, max_word_length=12)
    embedding.set_vocabulary(["<unk>", "the", "cat"])
    x = embedding(np.array([[1, 2, 0]]))      # (1, 3, 32): "the", "cat", "<unk>"
    chars = word_characters(["the", "cat", "cats"], 12)[None]
    y = embedding(np.array([[1, 2, 0]]), token_chars=chars)   # "cats" has its own vector
    ```

    References:
        - [Kim et al., 2016](https://arxiv.org/abs/1508.06615)
        - [Jozefowicz et al., 2016](https://arxiv.org/abs/1602.02410)
    """

    def __init__(self, vocab_size, output_dim, max_word_length=24, char_embedding_dim=16,
                 filters=DEFAULT_FILTERS, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.output_dim = output_dim
        self.seed = seed
        self.create_character_cnn(output_dim, max_word_length, char_embedding_dim, filters,
                                  seed=seed)

    def build(self, input_shape=None):
        self.build_character_cnn()
        self.built = True

    def call(self, token_ids, token_chars=None):
        if token_chars is None:
            token_ids = checked_ids("token_ids", token_ids, self.vocab_size)
            token_chars = ops.take(self.characters, token_ids, axis=0)
        return self.encode_characters(token_chars)

    def get_config(self):
        config = super().get_config()
        config.update({"vocab_size": self.vocab_size, "output_dim": self.output_dim,
                       "seed": self.seed, **self.character_cnn_config()})
        return config
