"""The pointer softmax language model: PSMM's mixture with Gulcehre et al.'s switch."""

import keras

from psmm_tf.layers import PointerSoftmax
from psmm_tf.models.pointer_sentinel_lm import PointerSentinelLM


@keras.saving.register_keras_serializable(package="psmm_tf")
class PointerSoftmaxLM(PointerSentinelLM):
    """`PointerSentinelLM` with the sentinel replaced by a switch MLP on `h_t` (Gulcehre 2016).

    Everything else (backbone, window, mixture, loss) is the same, so comparing the two models
    measures the gate alone.

    Args:
        switch_units: int. Hidden units of the switch MLP.
        **kwargs: as `LanguageModel`.
    """

    def __init__(self, vocab_size, switch_units=64, **kwargs):
        self.switch_units = switch_units
        super().__init__(vocab_size, **kwargs)

    def build_head(self):
        if not hasattr(self, "pointer"):
            self.pointer = PointerSoftmax(self.window_size, switch_units=self.switch_units,
                                          name="pointer")
        self.pointer.build((None, None, self.hidden_dim))

    def get_config(self):
        config = super().get_config()
        config.pop("initial_gate")  # a switch, not a sentinel: PSMM's initial gate is not used
        config["switch_units"] = self.switch_units
        return config
