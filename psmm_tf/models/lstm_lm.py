"""The softmax-only LSTM language model: the paper's baseline on the same backbone."""

import keras

from psmm_tf.models.language_model import LanguageModel
from psmm_tf.models.registry import BASELINE_KIND, register_model


@register_model
@keras.saving.register_keras_serializable(package="psmm_tf")
class LSTMLanguageModel(LanguageModel):
    """The zoneout + variational LSTM language model with a plain vocabulary softmax.

    The same backbone, windows, state and memory as `PointerSentinelLM` (the memory of hidden
    states is what a neural cache reads at evaluation), without the pointer. Train it with
    `keras.losses.SparseCategoricalCrossentropy(from_logits=True)` on `vocab_logits`.

    Args:
        backbone: an `LSTMBackbone`.
        **kwargs: as `LanguageModel` (`pointer` excepted).

    Example:
    ```python
    backbone = LSTMBackbone(vocab_size=10000, embedding_dim=650, hidden_dim=650, num_layers=2)
    model = LSTMLanguageModel(backbone, window_size=100)
    ```
    """

    kind = BASELINE_KIND

    def __init__(self, backbone, **kwargs):
        super().__init__(backbone, **kwargs)
