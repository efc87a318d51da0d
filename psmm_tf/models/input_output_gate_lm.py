"""A trained language model with an input-to-output gate on its softmax (Takase et al. 2017)."""

import keras

from psmm_tf.layers import InputOutputGate
from psmm_tf.models.language_model import ScoringMixin


@keras.saving.register_keras_serializable(package="psmm_tf")
class InputOutputGateLM(ScoringMixin, keras.Model):
    """Wraps a trained `LanguageModel`, frozen, and gates its vocabulary logits by input word.

    `vocab_logits <- InputOutputGate(x_t) * vocab_logits` at each predicted position; the rest of
    the wrapped model's outputs (a pointer's attention and gate included) is unchanged, so
    `log_prob` and `distribution` are the wrapped model's own on the gated logits. Only the gate
    is trained (paper: Adam, learning rate 0.001).

    The wrapped model always runs in inference mode (no dropout), so with a sampled or CNN
    softmax it gives exact `vocab_logits` `(batch_size, T, V)` in training too: the gate needs
    every word's logit.

    Args:
        base_model: a trained `psmm_tf.models.LanguageModel`; it is frozen.
        embedding_dim, dropout, seed: of the gate (`InputOutputGate`).

    Call arguments and returns: as `LanguageModel` (`targets` is accepted and not needed).

    Example:
    ```python
    import numpy as np
    from psmm_tf.models import InputOutputGateLM, LSTMBackbone, PointerSentinelLM

    backbone = LSTMBackbone(vocab_size=1000, embedding_dim=64, hidden_dim=64, num_layers=2)
    trained = PointerSentinelLM(backbone, window_size=100)   # in practice: a trained model
    gated = InputOutputGateLM(trained, embedding_dim=300, dropout=0.5)
    ids = np.random.default_rng(0).integers(0, 1000, size=(2, 21)).astype("int32")
    scores = gated.score_with_state(ids[:, :-1], ids[:, 1:])
    ```
    """

    def __init__(self, base_model, embedding_dim=300, dropout=0.5, seed=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(base_model, dict):
            base_model = keras.saving.deserialize_keras_object(base_model)
        self.base_model = base_model
        self.base_model.trainable = False
        self.embedding_dim = embedding_dim
        self.dropout = dropout
        self.seed = seed
        self.dtype_policy = base_model.dtype_policy  # the gate computes as the base model
        self.gate = InputOutputGate(base_model.vocab_size, embedding_dim, dropout, seed,
                                    name="input_output_gate", dtype=base_model.dtype_policy)
        self.gate.build()
        self.built = True

    # The wrapped model's sizes, state and memory are this model's.
    vocab_size = property(lambda self: self.base_model.vocab_size)
    hidden_dim = property(lambda self: self.base_model.hidden_dim)
    window_size = property(lambda self: self.base_model.window_size)
    memory_size = property(lambda self: self.base_model.memory_size)
    num_layers = property(lambda self: self.base_model.num_layers)
    softmax = property(lambda self: self.base_model.softmax)

    # The wrapped model's preprocessor scores strings for this one too (`score_text`).
    preprocessor = property(lambda self: self.base_model.preprocessor)

    def quantize(self, mode=None, **kwargs):
        """Refused: the gate's layers have no quantized form that reloads; quantize the
        wrapped model (`base_model.quantize`) before the gate is trained on it."""
        del kwargs
        raise ValueError(f"quantize({mode!r}): an InputOutputGateLM is not quantized (its gate "
                         f"would not reload); quantize the model it wraps instead.")

    def reset_compiled_functions(self):
        """Drops the cached compiled scoring functions, so the next call traces them again."""
        self.__dict__["_scoring_functions"] = {}

    def set_vocabulary(self, words):
        """Gives the wrapped model's softmax the vocabulary's words (CNN softmax only)."""
        self.base_model.set_vocabulary(words)

    def zero_state(self, batch_size):
        return self.base_model.zero_state(batch_size)

    def empty_memory(self, batch_size):
        return self.base_model.empty_memory(batch_size)

    def call(self, token_ids, token_mask=None, state=None, memory=None, context_length=0,
             targets=None, training=False, token_chars=None):
        # The frozen model runs in inference mode (no dropout); only the gate trains.
        outputs = dict(self.base_model(token_ids, token_mask=token_mask, state=state,
                                       memory=memory, context_length=context_length,
                                       training=False, token_chars=token_chars))
        # Takase et al. (2017): p(w_{t+1}) = softmax(g_t * (U h_t + b_U)), g_t from x_t alone.
        gate = self.gate(token_ids[:, context_length:], training=training)
        outputs["vocab_logits"] = outputs["vocab_logits"] * gate
        return outputs

    def log_prob(self, outputs, targets):
        return self.base_model.log_prob(outputs, targets)

    def distribution(self, outputs, extra_ids=0):
        return self.base_model.distribution(outputs, extra_ids)

    def log_distribution(self, outputs, extra_ids=0):
        return self.base_model.log_distribution(outputs, extra_ids)

    def get_config(self):
        config = super().get_config()
        config.update({"base_model": keras.saving.serialize_keras_object(self.base_model),
                       "embedding_dim": self.embedding_dim, "dropout": self.dropout,
                       "seed": self.seed})
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
