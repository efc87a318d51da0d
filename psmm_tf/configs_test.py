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
        del fields["train"]["char_cnn_clip_norm"]
        config = configs.ExperimentConfig.from_json(json.dumps(fields))
        self.assertIsNone(config.train.pointer_clip_norm)  # one joint norm
        self.assertIsNone(config.train.char_cnn_clip_norm)
        self.assertEqual(config.train.pointer_loss_weight, 1.0)  # the paper's eq. 9
        self.assertIsNone(config.model.initial_gate)
        self.assertFalse(config.train.calibrate_gate)  # the trained gate

    def test_bad_pointer_settings_are_refused(self):
        for field, value in (("pointer_clip_norm", 0.0), ("char_cnn_clip_norm", -1.0),
                             ("pointer_loss_weight", -1.0),
                             ("pointer_loss_weight", float("inf"))):
            with self.subTest(field=field), self.assertRaisesRegex(ValueError, field):
                configs.TrainConfig(**{field: value})


if __name__ == "__main__":
    tf.test.main()
