"""The pointer sentinel-LSTM language model (Merity et al. 2016)."""

import keras

from psmm_tf.layers import (
    PointerSentinel,
    mixture_distribution,
    mixture_log_prob,
    mixture_log_prob_from_vocab,
)
from psmm_tf.models.language_model import LanguageModel


@keras.saving.register_keras_serializable(package="psmm_tf")
class PointerSentinelLM(LanguageModel):
    """An LSTM language model whose softmax is mixed with a sentinel pointer over its window.

    `p(y) = g p_vocab(y) + sum_{i in window, x_i = y} a_i` (paper eq. 3), with the attention `a`
    and the gate `g` from `PointerSentinel` on the last layer's hidden states. Arguments, call
    arguments and the windowing are those of `LanguageModel`; the outputs add `attention`
    `(batch_size, T, K)` and `gate` `(batch_size, T)`. Train it with `PointerSentinelLoss`.

    Args:
        initial_gate: optional float in (0, 1): the gate the pointer starts near (see
            `PointerSentinel`); None is the paper's initialisation (gate near `1 / (L + 1)`).
        **kwargs: as `LanguageModel`.

    Example:
    ```python
    model = PointerSentinelLM(vocab_size=10000, window_size=100)
    outputs = model(token_ids, memory=model.empty_memory(32), training=True)
    loss = PointerSentinelLoss()(targets, outputs)
    ```

    References:
        - [Merity et al., 2016](https://arxiv.org/abs/1609.07843)
    """

    def __init__(self, vocab_size, initial_gate=None, **kwargs):
        self.initial_gate = initial_gate
        super().__init__(vocab_size, **kwargs)

    def build_head(self):
        if not hasattr(self, "pointer"):
            # Seeded from the model's seed, so a model rebuilt from its config starts from the
            # same weights (the diagnostics measure how far the pointer moved from them).
            seeds = (None, None) if self.seed is None else (self.seed + 101, self.seed + 102)
            self.pointer = PointerSentinel(
                self.window_size, name="pointer",
                kernel_initializer=keras.initializers.GlorotUniform(seed=seeds[0]),
                sentinel_initializer=keras.initializers.GlorotUniform(seed=seeds[1]),
                initial_gate=self.initial_gate)
        self.pointer.build((None, None, self.hidden_dim))

    def head_outputs(self, hidden, older_hidden, older_mask):
        attention, gate = self.pointer(hidden, memory=older_hidden, memory_mask=older_mask)
        return {"attention": attention, "gate": gate}

    def get_config(self):
        config = super().get_config()
        config["initial_gate"] = self.initial_gate
        return config

    def log_prob(self, outputs, targets):
        if "target_vocab_log_prob" in outputs:  # sampled softmax in training
            return mixture_log_prob_from_vocab(outputs["target_vocab_log_prob"],
                                               outputs["attention"], outputs["gate"],
                                               outputs["key_ids"], targets)
        return mixture_log_prob(outputs["vocab_logits"], outputs["attention"], outputs["gate"],
                                outputs["key_ids"], targets)

    def distribution(self, outputs):
        return mixture_distribution(outputs["vocab_logits"], outputs["attention"],
                                    outputs["gate"], outputs["key_ids"])
