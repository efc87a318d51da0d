"""A model's own hyperparameters: a model class registered here, with a setting no other model
has, gets its flag, its config value (config.json included) and its constructor argument with
no edit of configs.py, config_flags.py or build_model; a bad value is refused naming it."""

import json

from absl import flags

from psmm_tf import configs, testing
from psmm_tf.models import LanguageModel, build_model, register_model, unregister_model
from psmm_tf.trainers import config_flags


class _SharpLM(LanguageModel):
    """The LSTM language model with one setting of its own, `sharpness` (kept, not used)."""

    kind = "hyperparameters_test_lm"
    hyperparameters = (configs.Hyperparameter(
        "sharpness", int, 1, "How sharp the test model is.", accepts=lambda n: n >= 1,
        expected="an integer >= 1"),)
    compared_arguments = ("sharpness",)

    def __init__(self, backbone, sharpness=1, **kwargs):
        self.sharpness = sharpness
        super().__init__(backbone, **kwargs)


def _flag_values(*args):
    """psmm-train's config flags (and the two others `check_combination` reads), parsed."""
    flag_values = flags.FlagValues()
    config_flags.define_config_flags(flag_values, __name__)
    config_flags.define_gate_flags(flag_values, __name__)
    flags.DEFINE_bool("compare_baseline", False, "", flag_values=flag_values)
    flag_values(["psmm-train", *args])
    return flag_values


def _config(flag_values):
    config = configs.get_preset("tiny").replace(**config_flags.config_overrides(flag_values))
    config_flags.check_combination(config, flag_values)
    return config


class ModelHyperparametersTest(testing.TestCase):
    def setUp(self):
        super().setUp()
        register_model(_SharpLM)
        self.addCleanup(unregister_model, _SharpLM.kind)

    def test_a_new_models_setting_reaches_flags_config_and_model(self):
        flag_values = _flag_values(f"--model={_SharpLM.kind}", "--sharpness=3")
        self.assertIn("How sharp the test model is. (--model=hyperparameters_test_lm)",
                      flag_values["sharpness"].help)
        # --model's help names every registered kind with its class's summary.
        self.assertIn(f"{_SharpLM.kind}: {_SharpLM.__doc__.strip().splitlines()[0].rstrip('.')}",
                      flag_values["model"].help)
        self.assertIn("psmm: An LSTM language model whose softmax is mixed with a sentinel "
                      "pointer", flag_values["model"].help)
        self.assertEqual(config_flags.preset_notes("tiny")["sharpness"],
                         "default from --preset=tiny: 1")
        config = _config(flag_values)
        self.assertEqual((config.model.sharpness, config.model.hyperparameters),
                         (3, {"sharpness": 3}))
        written = config.to_json()
        self.assertEqual(json.loads(written)["model"]["sharpness"], 3)  # beside the fields
        self.assertEqual(configs.ExperimentConfig.from_json(written), config)
        model = build_model(config.replace(model={"vocab_size": 30}).model)
        self.assertIsInstance(model, _SharpLM)
        self.assertEqual(model.sharpness, 3)
        # Its default where the flag is not given; config.json still names it.
        config = _config(_flag_values(f"--model={_SharpLM.kind}"))
        self.assertEqual((config.model.sharpness, config.model.hyperparameters), (1, {}))
        self.assertEqual(json.loads(config.to_json())["model"]["sharpness"], 1)
        self.assertEqual(build_model(config.replace(model={"vocab_size": 30}).model).sharpness, 1)

    def test_bad_values_name_the_setting_and_what_it_expects(self):
        with self.assertRaisesRegex(flags.IllegalFlagValueError,
                                    r"--sharpness=0: must be an integer >= 1"):
            _flag_values(f"--model={_SharpLM.kind}", "--sharpness=0")
        with self.assertRaisesRegex(ValueError, r"--sharpness is a setting of "
                                                r"--model=hyperparameters_test_lm, not of "
                                                r"--model=psmm"):
            _config(_flag_values("--model=psmm", "--sharpness=2"))
        for value in (0, "3", 2.5, True):
            with self.subTest(value=value), self.assertRaisesRegex(
                    ValueError, rf"sharpness must be an integer >= 1, got {value!r}\."):
                configs.ModelConfig(kind=_SharpLM.kind, hyperparameters={"sharpness": value})
        fields = json.loads(configs.get_preset("tiny").replace(
            model={"kind": _SharpLM.kind}).to_json())
        fields["model"]["sharpness"] = -1
        with self.assertRaisesRegex(ValueError, r"sharpness must be an integer >= 1, got -1"):
            configs.ExperimentConfig.from_json(json.dumps(fields))

    def test_an_unregistered_model_takes_its_flag_away(self):
        unregister_model(_SharpLM.kind)
        self.assertNotIn("sharpness", {spec.name for spec in config_flags.all_flags()})
        with self.assertRaises(flags.UnrecognizedFlagError):
            _flag_values("--sharpness=2")
        register_model(_SharpLM)


if __name__ == "__main__":
    testing.main()
