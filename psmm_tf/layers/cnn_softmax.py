"""CNN softmax: output word embeddings from a character CNN (Jozefowicz et al. 2016, §3.2)."""

import keras
from keras import ops

from psmm_tf.layers.char_cnn import DEFAULT_FILTERS, CharacterCNN
from psmm_tf.layers.mixture import checked_ids
from psmm_tf.layers.sampled_softmax import log_uniform_sample, sampled_target_log_prob


@keras.saving.register_keras_serializable(package="psmm_tf")
class CNNSoftmax(CharacterCNN, keras.layers.Layer):
    """A softmax whose output embedding of word w is `CNN(chars(w)) + M corr_w`.

    The character CNN (`CharacterCNN`: embedding, convolutions of several widths, max over
    time, a highway layer, a projection to D) shares its parameters across words, so the output
    layer's size no longer grows as `V x D`; the low-dimensional correction `corr_w`
    (`correction_dim` per word, projected by `M`) restores the capacity to tell apart words
    that are spelled alike (Jozefowicz et al. 2016, "CNN Softmax"). Logits are `h . e_w + b_w`.
    Training uses `sampled_log_prob`, which spells only the targets and `num_sampled`
    log-uniform samples; `call` gives full logits.

    Call `set_vocabulary(words)` once after construction (the spelling is a weight, saved with
    the model).

    Args:
        vocab_size: int. V.
        output_dim: int. D, the hidden size of the language model.
        num_sampled: int. Samples per training step.
        max_word_length: int. Characters kept per word, begin and end markers included.
        char_embedding_dim: int. Width of the character embedding.
        filters: sequence of `(width, count)` convolution filters.
        correction_dim: int. Size of the per-word correction vectors (0 disables them).
        seed: optional int.

    Call arguments:
        hidden: float `(batch_size, T, D)`.

    Returns:
        Full logits `(batch_size, T, V)`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.layers import CNNSoftmax

    words = ["<unk>", "<eos>", "the", "cat", "cats", "sat"]
    head = CNNSoftmax(vocab_size=len(words), output_dim=32, num_sampled=3, correction_dim=8)
    head.set_vocabulary(words)
    hidden = np.random.default_rng(0).normal(size=(2, 7, 32)).astype("float32")
    logits = head(hidden)                                   # (2, 7, 6)
    log_p = head.sampled_log_prob(hidden, np.full((2, 7), 3))  # a sampled estimate, (2, 7)
    ```

    References:
        - [Jozefowicz et al., 2016](https://arxiv.org/abs/1602.02410)
    """

    def __init__(self, vocab_size, output_dim, num_sampled=1024, max_word_length=24,
                 char_embedding_dim=16, filters=DEFAULT_FILTERS, correction_dim=128, seed=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.output_dim = output_dim
        self.num_sampled = num_sampled
        self.correction_dim = correction_dim
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.create_character_cnn(output_dim, max_word_length, char_embedding_dim, filters)

    def build(self, input_shape=None):
        self.build_character_cnn()
        if self.correction_dim:
            self.correction = self.add_weight(
                name="correction", shape=(self.vocab_size, self.correction_dim),
                initializer=keras.initializers.RandomNormal(stddev=0.01, seed=self.seed))
            self.correction_projection = self.add_weight(
                name="correction_projection", shape=(self.correction_dim, self.output_dim),
                initializer=keras.initializers.GlorotUniform(seed=self.seed))
        self.bias = self.add_weight(name="bias", shape=(self.vocab_size,), initializer="zeros")
        self.built = True

    def word_embeddings(self, ids):
        """Output embeddings `(N, D)` of the words `ids` `(N,)`: CNN plus correction."""
        embeddings = self.encode_characters(ops.take(self.characters, ids, axis=0))
        if self.correction_dim:
            embeddings += ops.matmul(ops.take(self.correction, ids, axis=0),
                                     self.correction_projection)
        return embeddings

    def call(self, hidden):
        embeddings = self.word_embeddings(ops.arange(self.vocab_size, dtype="int32"))
        return ops.einsum("btd,vd->btv", hidden, embeddings) + self.bias

    def sampled_log_prob(self, hidden, targets):
        """Estimate of `log p_vocab(targets)` from a fresh sample: float32 `(B, T)`."""
        targets = checked_ids("targets", targets, self.vocab_size)
        sampled_ids = log_uniform_sample(self.num_sampled, self.vocab_size, self.seed_generator)
        # Spell the batch's targets and the samples (static shapes: XLA compiles it).
        batch_size, num_steps = ops.shape(targets)[0], ops.shape(targets)[1]
        num_targets = batch_size * num_steps
        flat_targets = ops.reshape(targets, (-1,))
        embeddings = self.word_embeddings(ops.concatenate([flat_targets, sampled_ids], 0))
        target_embeddings = ops.reshape(embeddings[:num_targets], (batch_size, num_steps, -1))
        target_logits = (ops.sum(hidden * target_embeddings, -1)
                         + ops.take(self.bias, targets))
        sampled_logits = (ops.einsum("btd,sd->bts", hidden, embeddings[num_targets:])
                          + ops.take(self.bias, sampled_ids))
        return sampled_target_log_prob(target_logits, sampled_logits, targets, sampled_ids,
                                       self.vocab_size)

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocab_size": self.vocab_size, "output_dim": self.output_dim,
            "num_sampled": self.num_sampled, "correction_dim": self.correction_dim,
            "seed": self.seed, **self.character_cnn_config(),
        })
        return config
