"""Every class `import psmm_tf` registers survives get_config -> from_config and keras.saving
serialisation with the same config (keras-hub's `run_serialization_test`), on every backend."""

import keras
from absl.testing import parameterized

import psmm_tf
from psmm_tf import testing
from psmm_tf.data.vocabulary import Vocabulary
from psmm_tf.layers import (
    CharacterEmbedding,
    CharacterLSTMOutput,
    CNNSoftmax,
    Dense,
    InputOutputGate,
    LockedDropout,
    PointerSentinel,
    PointerSentinelMixture,
    PointerSoftmax,
    SampledSoftmax,
    ZoneoutLSTM,
)
from psmm_tf.losses import MixtureNLL, PointerSentinelLoss
from psmm_tf.models import (
    CharacterOutputLM,
    InputOutputGateLM,
    LanguageModelPreprocessor,
    LSTMBackbone,
    LSTMLanguageModel,
    PointerSentinelLM,
    PointerSoftmaxLM,
    WordTokenizer,
)
from psmm_tf.models.accuracy import SparseCategoricalAccuracy

WORDS = ["<unk>", "<eos>", "the", "cat", "sat"]


def _backbone():
    return LSTMBackbone(vocab_size=len(WORDS), embedding_dim=6, hidden_dim=8, num_layers=2,
                        input_dropout=0.1, hidden_dropout=0.2, zoneout=0.1, seed=3)


INSTANCES = {
    "ZoneoutLSTM": lambda: ZoneoutLSTM(8, zoneout=0.1, seed=1),
    "LockedDropout": lambda: LockedDropout(0.3, seed=2),
    "Dense": lambda: Dense(4, activation="tanh"),
    "PointerSentinel": lambda: PointerSentinel(5, initial_gate=0.6),
    "PointerSoftmax": lambda: PointerSoftmax(5, switch_units=4),
    "SampledSoftmax": lambda: SampledSoftmax(len(WORDS), num_sampled=3, seed=1),
    "CNNSoftmax": lambda: CNNSoftmax(len(WORDS), 8, num_sampled=3, max_word_length=6),
    "CharacterEmbedding": lambda: CharacterEmbedding(len(WORDS), 8, max_word_length=6,
                                                     filters=((1, 4), (2, 4)), seed=2),
    "InputOutputGate": lambda: InputOutputGate(len(WORDS), embedding_dim=4, dropout=0.2),
    "PointerSentinelLoss": lambda: PointerSentinelLoss(pointer_weight=0.5),
    "PointerSentinelMixture": lambda: PointerSentinelMixture(output_mode="probs"),
    "MixtureNLL": lambda: MixtureNLL(reduction="sum"),
    "SparseCategoricalAccuracy": lambda: SparseCategoricalAccuracy(name="accuracy"),
    "LSTMBackbone": _backbone,
    "WordTokenizer": lambda: WordTokenizer(Vocabulary(WORDS), sequence_length=7),
    "LanguageModelPreprocessor": lambda: LanguageModelPreprocessor(Vocabulary(WORDS)),
    "LSTMLanguageModel": lambda: LSTMLanguageModel(_backbone(), window_size=4),
    "PointerSentinelLM": lambda: PointerSentinelLM(
        _backbone(), window_size=4, initial_gate=0.7, seed=5,
        preprocessor=LanguageModelPreprocessor(Vocabulary(WORDS))),
    "PointerSoftmaxLM": lambda: PointerSoftmaxLM(_backbone(), window_size=4, switch_units=4),
    "InputOutputGateLM": lambda: InputOutputGateLM(
        LSTMLanguageModel(_backbone(), window_size=4), embedding_dim=4, dropout=0.2, seed=1),
    "CharacterLSTMOutput": lambda: CharacterLSTMOutput(6, max_word_length=8, dropout=0.1,
                                                       char_dropout=0.2, seed=4),
    "CharacterOutputLM": lambda: CharacterOutputLM(
        PointerSentinelLM(_backbone(), window_size=4), units=6, max_word_length=8,
        char_dropout=0.2, seed=2),
}

# Registered so that keras-hub's `CausalLM.from_preset` finds the tasks' base (its
# `backbone_cls`); abstract (no call of its own), never serialised itself.
ABSTRACT = {"RecurrentCausalLM"}


class SerializationTest(testing.TestCase, parameterized.TestCase):
    def test_every_registered_class_is_covered(self):
        registered = {name.split(">", 1)[1] for name in
                      keras.saving.get_custom_objects() if name.startswith("psmm_tf>")}
        self.assertTrue(psmm_tf.__version__)
        self.assertEqual(registered - ABSTRACT, set(INSTANCES))

    @parameterized.named_parameters(*[(name, name) for name in INSTANCES])
    def test_config_round_trip(self, name):
        self.run_serialization_test(INSTANCES[name]())
