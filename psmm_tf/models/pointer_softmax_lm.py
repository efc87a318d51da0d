"""The pointer softmax language model: PSMM's mixture with Gulcehre et al.'s switch."""

import keras

from psmm_tf.configs import Hyperparameter
from psmm_tf.layers import PointerSoftmax
from psmm_tf.models.language_model import LanguageModel
from psmm_tf.models.parameters import pointer_parameter_count
from psmm_tf.models.registry import register_model


@register_model
@keras.saving.register_keras_serializable(package="psmm_tf")
class PointerSoftmaxLM(LanguageModel):
    """`PointerSentinelLM` with the sentinel replaced by a switch MLP on `h_t` (Gulcehre 2016).

    Everything else (backbone, window, mixture, loss) is the same, so comparing the two models
    measures the gate alone.

    Args:
        backbone: an `LSTMBackbone`.
        window_size: int. The pointer's window.
        switch_units: int. Hidden units of the switch MLP.
        **kwargs: as `LanguageModel`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.models import LSTMBackbone, PointerSoftmaxLM

    backbone = LSTMBackbone(vocab_size=1000, embedding_dim=64, hidden_dim=64, num_layers=2)
    model = PointerSoftmaxLM(backbone, window_size=100, switch_units=64)
    ids = np.random.default_rng(0).integers(0, 1000, size=(2, 21)).astype("int32")
    scores = model.score_with_state(ids[:, :-1], ids[:, 1:])   # gate: the switch's vocabulary share
    ```
    """

    kind = "pointer_softmax"
    has_pointer = True
    hyperparameters = (Hyperparameter(
        "switch_units", int, 64, "Hidden units of the pointer softmax's switch MLP.",
        accepts=lambda units: units >= 1, expected="an integer >= 1"),)
    compared_arguments = ("switch_units",)

    @classmethod
    def head_parameter_count(cls, model_config):
        """The pointer's query (W, b) and, in place of the sentinel, the switch MLP: W_z
        `[D, U]`, b_z `[U]`, v `[U]` and c."""
        hidden, units = model_config.hidden_dim, model_config.switch_units
        return pointer_parameter_count(hidden) - hidden + hidden * units + 2 * units + 1

    def __init__(self, backbone, window_size=100, switch_units=64, **kwargs):
        # Seeded from the model's seed, as PointerSentinelLM's pointer.
        seed = kwargs.get("seed")
        pointer = PointerSoftmax(
            window_size, switch_units=switch_units, name="pointer",
            kernel_initializer=keras.initializers.GlorotUniform(
                seed=None if seed is None else seed + 101))
        self.switch_units = switch_units
        super().__init__(backbone, window_size=window_size, pointer=pointer, **kwargs)

    def get_config(self):
        config = super().get_config()
        config["switch_units"] = self.switch_units
        return config
