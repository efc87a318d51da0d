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
    import numpy as np
    from psmm_tf.models import LSTMBackbone, LSTMLanguageModel

    backbone = LSTMBackbone(vocab_size=1000, embedding_dim=64, hidden_dim=64, num_layers=2)
    model = LSTMLanguageModel(backbone, window_size=100)
    ids = np.random.default_rng(0).integers(0, 1000, size=(2, 21)).astype("int32")
    scores = model.score_with_state(ids[:, :-1], ids[:, 1:])  # log_probs (2, 20), gate 1, ...
    ```
    """

    kind = BASELINE_KIND

    def __init__(self, backbone, **kwargs):
        super().__init__(backbone, **kwargs)
