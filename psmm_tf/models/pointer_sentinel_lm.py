"""The pointer sentinel-LSTM language model (Merity et al. 2016)."""

import json
import os

import keras
import numpy as np
from keras_hub.src.utils import preset_utils

from psmm_tf.configs import Hyperparameter
from psmm_tf.layers import PointerSentinel
from psmm_tf.layers.pointer_sentinel import check_gate_calibration
from psmm_tf.models.language_model import LanguageModel
from psmm_tf.models.parameters import pointer_parameter_count
from psmm_tf.models.registry import register_model

# The gate's calibration in a preset's task.weights.h5: an attribute of the file's root.
GATE_CALIBRATION_ATTRIBUTE = "psmm_tf_gate_calibration"


@register_model
@keras.saving.register_keras_serializable(package="psmm_tf")
class PointerSentinelLM(LanguageModel):
    """An LSTM language model whose softmax is mixed with a sentinel pointer over its window.

    `p(y) = g p_vocab(y) + sum_{i in window, x_i = y} a_i` (paper eq. 3), with the attention `a`
    and the gate `g` from `PointerSentinel` on the last layer's hidden states (before output
    dropout). Call arguments and the windowing are those of `LanguageModel`; the outputs add
    `attention` `(batch_size, T, K)` and `gate` `(batch_size, T)`. Train it with
    `PointerSentinelLoss`.

    Args:
        backbone: an `LSTMBackbone`.
        window_size: int. `L`, the pointer's window, its own position included.
        initial_gate: optional float in (0, 1): the gate the pointer starts near (see
            `PointerSentinel`); None is the paper's initialisation (gate near `1 / (L + 1)`).
        gate_calibration: optional pair `(scale, bias)`: Platt scaling of the gate's logit,
            fitted on held-out text after training (see `PointerSentinel` and
            `psmm_tf.evaluation.gate_calibration`); None leaves eq. 8's gate.
        seed: optional int. Seed of the head (the pointer's initialisers: `seed + 101`, `+ 102`).
        **kwargs: as `LanguageModel`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.models import LSTMBackbone, PointerSentinelLM

    backbone = LSTMBackbone(vocab_size=1000, embedding_dim=64, hidden_dim=64, num_layers=2)
    model = PointerSentinelLM(backbone, window_size=100)
    ids = np.random.default_rng(0).integers(0, 1000, size=(4, 70)).astype("int32")
    first = model(ids[:, :35], memory=model.empty_memory(4))
    # The next 35 tokens read on from the carried state; their pointer sees the first 35.
    second = model(ids[:, 35:], state=first["state"], memory=first["memory"])
    second["attention"].shape, second["gate"].shape   # (4, 35, 134), (4, 35)
    ```

    References:
        - [Merity et al., 2016](https://arxiv.org/abs/1609.07843)
    """

    kind = "psmm"
    has_pointer = True
    hyperparameters = (Hyperparameter(
        "initial_gate", float, None, "The gate PSMM's sentinel starts near, in (0, 1); 0: the "
        "paper's initialisation (gate near 1 / (L + 1)).", accepts=lambda g: 0.0 < g < 1.0,
        expected="in (0, 1)", optional=True, zero_is_none=True),)

    @classmethod
    def head_parameter_count(cls, model_config):
        """The pointer's weights: query kernel W (D x D), query bias b and sentinel s."""
        return pointer_parameter_count(model_config.hidden_dim)

    def __init__(self, backbone, window_size=100, initial_gate=None, seed=None,
                 gate_calibration=None, **kwargs):
        # Seeded from the model's seed, so a model rebuilt from its config starts from the same
        # weights (the diagnostics measure how far the pointer moved from them).
        pointer = PointerSentinel(
            window_size, name="pointer",
            kernel_initializer=keras.initializers.GlorotUniform(seed=_offset(seed, 101)),
            sentinel_initializer=keras.initializers.GlorotUniform(seed=_offset(seed, 102)),
            initial_gate=initial_gate, gate_calibration=gate_calibration)
        self.initial_gate = initial_gate
        super().__init__(backbone, window_size=window_size, seed=seed, pointer=pointer, **kwargs)

    def get_config(self):
        config = super().get_config()
        config["initial_gate"] = self.initial_gate
        config["gate_calibration"] = self.pointer.get_config()["gate_calibration"]
        return config

    def set_gate_calibration(self, gate_calibration):
        """Sets (or with None removes) the gate's `(scale, bias)`. The model's own compiled
        functions (`score`) are traced again; functions a caller traced before keep the old
        gate."""
        self.pointer.gate_calibration = check_gate_calibration(gate_calibration)
        self.reset_compiled_functions()

    # --- the calibration in a preset: with the head's weights, not in task.json -------------

    def save_to_preset(self, preset_dir, max_shard_size=10):
        """`RecurrentCausalLM.save_to_preset`, the gate's calibration kept with the head's
        weights (`task.weights.h5`) instead of `task.json`: it was fitted to those weights, so
        keras-hub's loaders, which read the weights only with `load_weights=True`, give a preset
        loaded without them the uncalibrated gate of eq. 8."""
        super().save_to_preset(preset_dir, max_shard_size=max_shard_size)
        task_file = os.path.join(os.fspath(preset_dir), preset_utils.TASK_CONFIG_FILE)
        with open(task_file, encoding="utf-8") as file:
            task = json.load(file)
        task["config"]["gate_calibration"] = None
        with open(task_file, "w", encoding="utf-8") as file:
            json.dump(task, file, indent=4)

    def save_task_weights(self, filepath):
        """keras-hub's head weights, and the gate's calibration as an attribute of the file."""
        super().save_task_weights(filepath)
        if self.pointer.gate_calibration is not None:
            import h5py

            with h5py.File(filepath, "a") as file:
                file.attrs[GATE_CALIBRATION_ATTRIBUTE] = np.asarray(
                    self.pointer.gate_calibration, "float64")

    def load_task_weights(self, filepath):
        """keras-hub's head weights, and the gate's calibration where the file holds one (a
        file without it, such as a preset whose task.json holds the calibration, keeps the
        model's).

        Raises:
            ValueError: the file's calibration is not a pair `(scale, bias)` of finite numbers
                with `scale >= 0`, naming the file; the model is left as it was.
        """
        import h5py

        with h5py.File(filepath, "r") as file:
            stored = file.attrs.get(GATE_CALIBRATION_ATTRIBUTE)
        calibration = None
        if stored is not None:
            try:
                calibration = check_gate_calibration(np.asarray(stored, dtype="float64"))
            except (TypeError, ValueError) as error:
                raise ValueError(
                    f"{filepath}: its {GATE_CALIBRATION_ATTRIBUTE} attribute is not a gate "
                    f"calibration: expected a pair (scale, bias) of finite numbers with scale "
                    f">= 0, found {stored!r} ({error}).") from None
        super().load_task_weights(filepath)
        if calibration is not None:
            self.set_gate_calibration(calibration)


def _offset(seed, offset):
    return None if seed is None else seed + offset
