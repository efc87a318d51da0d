"""Configs: presets' training regime and JSON round trips, old files included."""

import json

import tensorflow as tf

from psmm_tf import configs


class ConfigTest(tf.test.TestCase):
    def test_round_trip(self):
        config = configs.get_preset("small").replace(train={"pointer_loss_weight": 0.5})
        self.assertEqual(configs.ExperimentConfig.from_json(config.to_json()), config)

    def test_every_preset_clips_the_pointer_on_its_own(self):
        for name in configs.PRESETS:
            train = configs.get_preset(name).train
            self.assertEqual((train.optimizer, train.clip_norm, train.pointer_clip_norm,
                              train.pointer_loss_weight, train.calibrate_gate),
                             ("sgd", 5.0, 0.25, 0.0, True), msg=name)

    def test_a_config_written_before_these_fields_reads_as_it_trained(self):
        fields = json.loads(configs.get_preset("small").to_json())
        del fields["train"]["pointer_clip_norm"], fields["train"]["pointer_loss_weight"]
        del fields["train"]["calibrate_gate"], fields["model"]["initial_gate"]
        del fields["train"]["char_cnn_clip_norm"], fields["train"]["lr_decay_from_epoch"]
        config = configs.ExperimentConfig.from_json(json.dumps(fields))
        self.assertIsNone(config.train.lr_decay_from_epoch)  # the paper's schedule
        self.assertIsNone(config.train.pointer_clip_norm)  # one joint norm
        self.assertIsNone(config.train.char_cnn_clip_norm)
        self.assertEqual(config.train.pointer_loss_weight, 1.0)  # the paper's eq. 9
        self.assertIsNone(config.model.initial_gate)
        self.assertFalse(config.train.calibrate_gate)  # the trained gate

    def test_model_hyperparameters_sit_beside_the_fields_and_belong_to_their_kind(self):
        medium = configs.get_preset("medium")
        fields = json.loads(medium.to_json())
        self.assertIsNone(fields["model"]["initial_gate"])  # psmm's own, with its value
        self.assertNotIn("switch_units", fields["model"])  # pointer_softmax's
        # A file listing every kind's settings (as psmm_tf wrote them before they were the
        # kinds' own) reads as the same config: another kind's setting shapes nothing.
        for value in (64, 128):
            fields["model"]["switch_units"] = value
            self.assertEqual(configs.ExperimentConfig.from_json(json.dumps(fields)), medium)
        fields["model"]["initial_gate"] = 0.3
        config = configs.ExperimentConfig.from_json(json.dumps(fields))
        self.assertEqual((config.model.initial_gate, config.model.hyperparameters),
                         (0.3, {"initial_gate": 0.3}))
        self.assertEqual(config, medium.replace(model={"initial_gate": 0.3}))
        switch = config.replace(model={"kind": "pointer_softmax", "switch_units": 32}).model
        self.assertEqual((switch.switch_units, switch.hyperparameters), (32, {"switch_units": 32}))
        for name, value, message in (
                ("initial_gate", 1.0, r"initial_gate must be in \(0, 1\) or None, got 1.0"),
                ("nope", 1, r"'nope' is neither a ModelConfig field nor a hyperparameter of "
                            r"model kind 'psmm' \(its own: \['initial_gate'\]\)")):
            fields["model"][name] = value
            with self.subTest(name=name), self.assertRaisesRegex(ValueError, message):
                configs.ExperimentConfig.from_json(json.dumps(fields))
            fields["model"].pop(name)

    def test_bad_pointer_settings_are_refused(self):
        for field, value in (("pointer_clip_norm", 0.0), ("char_cnn_clip_norm", -1.0),
                             ("pointer_loss_weight", -1.0),
                             ("pointer_loss_weight", float("inf"))):
            with self.subTest(field=field), self.assertRaisesRegex(ValueError, field):
                configs.TrainConfig(**{field: value})

    def test_edge_values_are_refused_naming_the_field(self):
        for make, message in [
            (lambda: configs.TrainConfig(lr_decay_from_epoch=0),
             r"lr_decay_from_epoch must be an integer >= 1 or None, got 0"),
            (lambda: configs.TrainConfig(lr_decay_from_epoch=6.0),
             r"lr_decay_from_epoch must be an integer >= 1 or None, got 6.0"),
            (lambda: configs.TrainConfig(lr_decay_from_epoch=True),
             r"lr_decay_from_epoch must be an integer >= 1 or None, got True"),
            (lambda: configs.TrainConfig(max_eval_tokens=1),
             r"max_eval_tokens must be >= 2 \(a word to read and one to predict\), got 1"),
            (lambda: configs.DataConfig(synthetic_seed=-1),
             r"synthetic_seed must be an integer >= 0 .*, got -1"),
            (lambda: configs.DataConfig(synthetic_seed=True), r"synthetic_seed must be"),
            (lambda: configs.get_preset("tiny").replace(train={"max_eval_tokens": 1}),
             r"max_eval_tokens must be >= 2"),
        ] + [(lambda n=n: configs.ModelConfig(max_word_length=n, input_embedding="chars"),
              rf"max_word_length must be >= 5 \(characters per spelled word, its begin and end "
              rf"markers included: the character CNN's widest filter is 5\), got {n}")
             for n in (1, 2, 3, 4)]:
            with self.subTest(message=message), self.assertRaisesRegex(ValueError, message):
                make()
        self.assertEqual(configs.TrainConfig(max_eval_tokens=2).max_eval_tokens, 2)
        self.assertEqual(configs.DataConfig(synthetic_seed=0).synthetic_seed, 0)
        self.assertEqual(configs.ModelConfig(max_word_length=5, softmax="cnn").max_word_length, 5)
        # A model that spells no word never reads it (an older run's config.json may hold 3).
        self.assertEqual(configs.ModelConfig(max_word_length=3).max_word_length, 3)

    def test_the_shortest_word_length_fits_the_character_cnn(self):
        from psmm_tf.layers.char_cnn import DEFAULT_FILTERS

        self.assertEqual(configs.MIN_WORD_LENGTH, max(width for width, _ in DEFAULT_FILTERS))


if __name__ == "__main__":
    tf.test.main()
