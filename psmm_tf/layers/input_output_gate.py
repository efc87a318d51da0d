"""The input-to-output gate of Takase, Suzuki and Nagata (2017)."""

import keras
from keras import ops

from psmm_tf.layers import locked_dropout
from psmm_tf.layers.dense import Dense

# sigmoid(3) = 0.953: a new gate barely changes the logits it multiplies.
INITIAL_BIAS = 3.0


@keras.saving.register_keras_serializable(package="psmm_tf")
class InputOutputGate(keras.layers.Layer):
    """A vocabulary-sized gate from the current input word: `g_t = sigmoid(W e'(x_t) + b)`.

    `e'` is an embedding of its own (not the language model's). The gate multiplies the output
    layer's logits, `p(w_{t+1}) = softmax(g_t * (U h_t + b_U))`, so a trained model's output can
    be sharpened or flattened per input word without retraining it.

    The bias starts at `INITIAL_BIAS` (sigmoid(3) = 0.95) and the embedding near 0, so a gate
    attached to a trained model starts close to the identity: training starts from the trained
    model's perplexity instead of from logits halved by a gate at sigmoid(0) = 0.5.

    Args:
        vocab_size: int. Number of input and output words.
        embedding_dim: int. Width of the gate's embedding `e'` (paper: 300).
        dropout: float in [0, 1). Dropout on `e'` in training (paper: 0.5).
        seed: optional int.

    Call arguments:
        token_ids: int `(batch_size, T)`, the input words `x_t`.
        training: bool.

    Returns:
        float `(batch_size, T, vocab_size)` in (0, 1).

    Example:
    ```python
    import numpy as np
    from psmm_tf.layers import InputOutputGate

    gate = InputOutputGate(vocab_size=1000, embedding_dim=300, dropout=0.5)
    g = gate(np.array([[3, 17, 256]]))  # (1, 3, 1000), near sigmoid(3) = 0.95 at the start
    ```

    References:
        - [Takase et al., 2017](https://arxiv.org/abs/1709.08907)
    """

    def __init__(self, vocab_size, embedding_dim=300, dropout=0.5, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}.")
        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.dropout = dropout
        self.seed = seed
        self.embedding = keras.layers.Embedding(vocab_size, embedding_dim, name="embedding",
                                                dtype=self.dtype_policy)
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.projection = Dense(
            vocab_size, activation="sigmoid", name="projection", dtype=self.dtype_policy,
            kernel_initializer=keras.initializers.GlorotUniform(seed=seed),
            bias_initializer=keras.initializers.Constant(INITIAL_BIAS),
        )

    def build(self, input_shape=None):
        self.embedding.build((None, None))
        self.projection.build((None, None, self.embedding_dim))
        self.built = True

    def call(self, token_ids, training=False):
        embedded = self.embedding(ops.cast(token_ids, "int32"))
        if training and self.dropout > 0.0:
            embedded = locked_dropout.dropout(embedded, self.dropout, self.seed_generator)
        return self.projection(embedded)

    def get_config(self):
        config = super().get_config()
        config.update({"vocab_size": self.vocab_size, "embedding_dim": self.embedding_dim,
                       "dropout": self.dropout, "seed": self.seed})
        return config
