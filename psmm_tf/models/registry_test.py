"""The model registry: every kind builds its class, and a new task registers in one file."""

import dataclasses

import numpy as np

from psmm_tf import configs, testing
from psmm_tf.layers import PointerSentinel
from psmm_tf.models import (
    LanguageModel,
    LSTMBackbone,
    build_model,
    expected_parameter_count,
    model_class,
    model_config_differences,
    model_kinds,
    register_model,
    registry,
)
from psmm_tf.models.parameters import pointer_parameter_count


class _TwoGatesLM(LanguageModel):
    """A task defined only here: the sentinel pointer, with its own kind and hyperparameter."""

    kind = "registry_test_lm"
    has_pointer = True
    hyperparameters = (configs.Hyperparameter(
        "start_gate", float, 0.5, "The gate the sentinel starts near.",
        accepts=lambda g: 0 < g < 1, expected="in (0, 1)"),)
    compared_arguments = ("start_gate",)

    @classmethod
    def head_parameter_count(cls, model_config):
        return pointer_parameter_count(model_config.hidden_dim)

    def __init__(self, backbone, window_size=100, start_gate=0.5, **kwargs):
        self.start_gate = start_gate
        super().__init__(backbone, window_size=window_size,
                         pointer=PointerSentinel(window_size, initial_gate=start_gate,
                                                 name="pointer"), **kwargs)


class RegistryTest(testing.TestCase):

    def test_each_kind_builds_its_class_with_the_counted_parameters(self):
        self.assertEqual(set(model_kinds()), {"psmm", "lstm", "pointer_softmax"})
        tiny = configs.get_preset("tiny").model
        for kind in model_kinds():
            config = dataclasses.replace(tiny, kind=kind, vocab_size=30)
            model = build_model(config)
            self.assertIs(type(model), model_class(kind))
            self.assertEqual(model.count_params(), expected_parameter_count(config), kind)
            self.assertEqual(model.has_pointer, kind != registry.BASELINE_KIND)
            self.assertEqual(model_config_differences(model, config), [])

    def test_a_new_task_registers_in_its_own_module(self):
        register_model(_TwoGatesLM)
        try:
            tiny = configs.get_preset("tiny")
            config = tiny.replace(model={"kind": "registry_test_lm", "vocab_size": 30,
                                         "start_gate": 0.3}).model
            self.assertEqual(config.start_gate, 0.3)
            model = build_model(config)
            self.assertIsInstance(model, _TwoGatesLM)
            self.assertEqual(model.start_gate, 0.3)  # its hyperparameter reaches the class
            self.assertEqual(model.pointer.initial_gate, 0.3)
            self.assertEqual(model.count_params(), expected_parameter_count(config))
            outputs = model(np.zeros((2, 9), "int32"), memory=model.empty_memory(2))
            self.assertIn("gate", outputs)
            other = dataclasses.replace(config, hyperparameters={})  # the default, 0.5
            self.assertEqual(model_config_differences(model, other),
                             ["start_gate: config 0.5, model 0.3"])
        finally:
            registry.unregister_model("registry_test_lm")
        with self.assertRaisesRegex(ValueError, "kind must be one of .*'pointer_softmax'\\), "
                                                "got 'registry_test_lm'"):
            build_model(config)

    def test_a_model_file_holds_a_language_model_or_is_refused(self):
        import importlib
        import os

        from psmm_tf.models import presets

        for module, name in presets._LANGUAGE_MODEL_BASES:  # the names read_model_file checks
            self.assertTrue(isinstance(getattr(importlib.import_module(module), name), type))
        tiny = dataclasses.replace(configs.get_preset("tiny").model, vocab_size=30)
        model = build_model(dataclasses.replace(tiny, kind="lstm"))
        directory = self.get_temp_dir()
        model.save(os.path.join(directory, "lm.keras"))
        self.assertIsInstance(presets.read_model_file(os.path.join(directory, "lm.keras")),
                              LanguageModel)
        model.backbone.save(os.path.join(directory, "backbone.keras"))  # a psmm_tf class too
        with self.assertRaisesRegex(ValueError, r"backbone.keras holds a LSTMBackbone, not a "
                                                r"psmm_tf language model"):
            presets.read_model_file(os.path.join(directory, "backbone.keras"))

    def test_a_kind_is_taken_once_and_must_be_declared(self):
        class Unnamed(LanguageModel):
            pass

        class Thief(LanguageModel):
            kind = "psmm"

        with self.assertRaisesRegex(TypeError, "Unnamed declares no model kind"):
            register_model(Unnamed)
        with self.assertRaisesRegex(ValueError, "'psmm' is taken by PointerSentinelLM"):
            register_model(Thief)

    def test_a_pointer_must_match_the_declaration(self):
        backbone = LSTMBackbone(vocab_size=30, embedding_dim=4, hidden_dim=4, num_layers=1)
        with self.assertRaisesRegex(TypeError, "_NoPointer declares has_pointer=True but was "
                                               "given pointer=None"):
            _NoPointer(backbone, window_size=3)


class _NoPointer(LanguageModel):
    kind = "registry_test_no_pointer"
    has_pointer = True


if __name__ == "__main__":
    testing.main()
