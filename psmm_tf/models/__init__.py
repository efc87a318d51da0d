"""Language models: the backbone and the tasks built on it."""

from psmm_tf.models.backbone import LSTMBackbone
from psmm_tf.models.input_output_gate_lm import InputOutputGateLM
from psmm_tf.models.language_model import LanguageModel
from psmm_tf.models.lstm_lm import LSTMLanguageModel
from psmm_tf.models.neural_cache import NeuralCache, cache_grid_search
from psmm_tf.models.parameters import expected_parameter_count
from psmm_tf.models.pointer_sentinel_lm import PointerSentinelLM
from psmm_tf.models.pointer_softmax_lm import PointerSoftmaxLM

MODEL_CLASSES = {
    "psmm": PointerSentinelLM,
    "lstm": LSTMLanguageModel,
    "pointer_softmax": PointerSoftmaxLM,
}


def build_model(model_config):
    """The language model a `psmm_tf.configs.ModelConfig` describes."""
    cls = MODEL_CLASSES[model_config.kind]
    extra = {}
    if model_config.kind == "pointer_softmax":
        extra["switch_units"] = model_config.switch_units
    return cls(
        vocab_size=model_config.vocab_size,
        embedding_dim=model_config.embedding_dim,
        hidden_dim=model_config.hidden_dim,
        num_layers=model_config.num_layers,
        window_size=model_config.window_size,
        input_dropout=model_config.input_dropout,
        hidden_dropout=model_config.hidden_dropout,
        output_dropout=model_config.output_dropout,
        zoneout=model_config.zoneout,
        seed=model_config.seed,
        softmax=model_config.softmax,
        num_sampled=model_config.num_sampled,
        max_word_length=model_config.max_word_length,
        name=f"{model_config.kind}_language_model",
        **extra,
    )


__all__ = [
    "InputOutputGateLM",
    "LSTMBackbone",
    "LSTMLanguageModel",
    "LanguageModel",
    "MODEL_CLASSES",
    "NeuralCache",
    "cache_grid_search",
    "PointerSentinelLM",
    "PointerSoftmaxLM",
    "build_model",
    "expected_parameter_count",
]
