"""Language models: the backbone and the tasks built on it."""

import dataclasses
import importlib
import os
import pkgutil

from psmm_tf.models.backbone import LSTMBackbone
from psmm_tf.models.causal_lm import RecurrentCausalLM
from psmm_tf.models.char_output_lm import CharacterOutputLM
from psmm_tf.models.input_output_gate_lm import InputOutputGateLM
from psmm_tf.models.inputs import validate_inputs
from psmm_tf.models.language_model import LanguageModel
from psmm_tf.models.lstm_lm import LSTMLanguageModel
from psmm_tf.models.parameters import expected_parameter_count
from psmm_tf.models.pointer_sentinel_lm import PointerSentinelLM
from psmm_tf.models.pointer_softmax_lm import PointerSoftmaxLM
from psmm_tf.models.preprocessor import LanguageModelPreprocessor
from psmm_tf.models.presets import read_model_file, rebuild_model
from psmm_tf.models.registry import (
    model_class,
    model_kinds,
    register_model,
    unregister_model,
)
from psmm_tf.models.tokenizer import WordTokenizer

# A new task is a module `<name>_lm.py` here whose class is `@register_model`ed: imported now.
for _module in pkgutil.iter_modules(__path__):
    if _module.name.endswith("_lm"):
        importlib.import_module(f"{__name__}.{_module.name}")


# Fields of a `ModelConfig` that must equal the attribute of the same name of a loaded base model.
_BASE_MODEL_FIELDS = ("vocab_size", "embedding_dim", "hidden_dim", "num_layers", "window_size",
                      "softmax", "input_embedding")


def build_model(model_config, preprocessor=None, dtype=None):
    """The language model a `psmm_tf.configs.ModelConfig` describes.

    `dtype` (a Keras dtype policy such as `TrainConfig.mixed_precision`; None: the global
    policy) is the policy of every layer of the model; the model saves and loads with it.

    `preprocessor` (a `LanguageModelPreprocessor`, optional) is saved with the model, so the
    `.keras` file scores strings (`score_text`) on its own.

    With `base_model` set: the trained model in that `.keras` file, frozen, wrapped in an
    `InputOutputGateLM` whose gate is new (Takase et al. 2017).

    Raises:
        FileNotFoundError: `base_model` does not exist.
        ValueError: the model in `base_model` is not the one the config describes.
    """
    if model_config.base_model is not None:
        return _gated_base_model(model_config)
    cls = model_class(model_config.kind)
    backbone = LSTMBackbone(
        vocab_size=model_config.vocab_size,
        embedding_dim=model_config.embedding_dim,
        hidden_dim=model_config.hidden_dim,
        num_layers=model_config.num_layers,
        input_dropout=model_config.input_dropout,
        hidden_dropout=model_config.hidden_dropout,
        zoneout=model_config.zoneout,
        seed=model_config.seed,
        init_scale=model_config.init_scale,
        input_embedding=model_config.input_embedding,
        max_word_length=model_config.max_word_length,
        name="backbone",
        dtype=dtype,
    )
    return cls(
        backbone,
        window_size=model_config.window_size,
        output_dropout=model_config.output_dropout,
        seed=model_config.seed,
        softmax=model_config.softmax,
        num_sampled=model_config.num_sampled,
        max_word_length=model_config.max_word_length,
        preprocessor=preprocessor,
        compile=False,
        name=f"{model_config.kind}_language_model",
        **model_config.hyperparameter_values(),  # the kind's own settings
    )


def model_config_differences(model, model_config):
    """How a (loaded) `model` differs from the model `model_config` describes.

    Returns:
        A list of strings, one per difference ("hidden_dim: config 16, model 32"; the class
        first where it differs); empty when `model` is that model. With `base_model` set, the
        model must be an `InputOutputGateLM` and its base model is compared.
    """
    if model_config.base_model is not None:
        if not isinstance(model, InputOutputGateLM):
            return [f"class: config an InputOutputGateLM (base_model set), model "
                    f"{type(model).__name__}"]
        model = model.base_model
    expected_class = model_class(model_config.kind)
    if type(model) is not expected_class:
        return [f"kind: config {model_config.kind!r} ({expected_class.__name__}), model "
                f"{type(model).__name__}"]
    names = _BASE_MODEL_FIELDS + expected_class.compared_arguments
    return [f"{name}: config {getattr(model_config, name)!r}, model {getattr(model, name)!r}"
            for name in names if getattr(model, name) != getattr(model_config, name)]


def _gated_base_model(model_config):
    """`InputOutputGateLM` over the frozen model of `model_config.base_model`."""
    path = model_config.base_model
    if not path.endswith(".keras") or not os.path.isfile(path):
        raise FileNotFoundError(
            f"base_model {path!r} is not a .keras file that exists: expected the model.keras "
            "of a trained run.")
    base = read_model_file(path, advice=" (base_model)")
    if isinstance(base, InputOutputGateLM):
        raise ValueError(f"base_model {path!r} already has an input-to-output gate; give the "
                         "model.keras of the run it was trained on.")
    differences = model_config_differences(
        base, dataclasses.replace(model_config, base_model=None))
    if differences:
        raise ValueError(f"base_model {path!r} does not match the model config ("
                         + "; ".join(differences) + ").")
    return InputOutputGateLM(base, embedding_dim=model_config.gate_embedding_dim,
                             dropout=model_config.gate_dropout, seed=model_config.seed,
                             name=f"{model_config.kind}_input_output_gate_language_model")


__all__ = [
    "CharacterOutputLM",
    "InputOutputGateLM",
    "LSTMBackbone",
    "LSTMLanguageModel",
    "LanguageModel",
    "LanguageModelPreprocessor",
    "PointerSentinelLM",
    "PointerSoftmaxLM",
    "RecurrentCausalLM",
    "WordTokenizer",
    "build_model",
    "expected_parameter_count",
    "model_class",
    "model_config_differences",
    "model_kinds",
    "rebuild_model",
    "register_model",
    "unregister_model",
    "validate_inputs",
]
