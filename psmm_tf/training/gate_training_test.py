"""The input-to-output gate run's config, its model and its vocabulary (Takase et al. 2017)."""

import dataclasses
import json
from pathlib import Path

import keras
import tensorflow as tf

from psmm_tf import configs, testing
from psmm_tf.data.vocabulary import Vocabulary
from psmm_tf.models import InputOutputGateLM, PointerSentinelLM, build_model
from psmm_tf.training import run_setup
from psmm_tf.training.gate_training import input_output_gate_config

WORDS = ["<unk>", "<eos>", "the", "company", "said", "shares", "of", "a", "in", "to"]


def write_base_run(directory, with_model=True, **model_fields):
    """A finished run's files: its config, a vocabulary and (optionally) a tiny saved model."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = configs.get_preset("tiny").replace(
        model={"vocab_size": len(WORDS), "seed": 3, **model_fields},
        train={"max_epochs": 7, "steps_per_epoch": 11, "optimizer": "sgd", "learning_rate": 1.0,
               "clip_norm": 0.25, "seed": 3},
        data={"synthetic_train_tokens": 2000})
    (directory / "config.json").write_text(config.to_json())
    Vocabulary(WORDS).save(directory / "vocab.txt")
    if with_model:
        model = build_model(dataclasses.replace(config.model, base_model=None))
        model.save(directory / "model.keras")
    return config


class InputOutputGateConfigTest(testing.TestCase):

    def test_keeps_the_base_run_and_sets_the_gate_and_adam(self):
        base_dir = Path(self.get_temp_dir()) / "base"
        base = write_base_run(base_dir, with_model=False)
        (base_dir / "model.keras").write_bytes(b"")  # only its existence is checked here
        config = input_output_gate_config(base_dir, embedding_dim=12, dropout=0.25)
        self.assertEqual(config.model.base_model, str(base_dir.absolute() / "model.keras"))
        self.assertEqual((config.model.gate_embedding_dim, config.model.gate_dropout), (12, 0.25))
        self.assertEqual((config.train.optimizer, config.train.learning_rate), ("adam", 1e-3))
        self.assertEqual(config.data, base.data)
        for name in ("clip_norm", "lr_decay", "patience", "max_epochs", "steps_per_epoch",
                     "seed", "batch_size", "num_predicted", "pointer_memory"):
            self.assertEqual(getattr(config.train, name), getattr(base.train, name), name)
        self.assertEqual(dataclasses.replace(config.model, base_model=None,
                                             gate_embedding_dim=300, gate_dropout=0.5),
                         base.model)
        config = input_output_gate_config(base_dir, learning_rate=0.01, max_epochs=2, seed=9,
                                          steps_per_epoch=4)
        self.assertEqual((config.train.learning_rate, config.train.max_epochs,
                          config.train.steps_per_epoch), (0.01, 2, 4))
        self.assertEqual((config.model.seed, config.train.seed), (9, 9))

    def test_clear_errors(self):
        base_dir = Path(self.get_temp_dir()) / "incomplete"
        write_base_run(base_dir, with_model=False)
        with self.assertRaisesRegex(FileNotFoundError, r"incomplete has no model.keras"):
            input_output_gate_config(base_dir)
        (base_dir / "model.keras").write_bytes(b"")
        (base_dir / "vocab.txt").unlink()
        with self.assertRaisesRegex(FileNotFoundError, r"has no vocab.txt"):
            input_output_gate_config(base_dir)
        with self.assertRaisesRegex(FileNotFoundError, r"has no config.json"):
            input_output_gate_config(Path(self.get_temp_dir()) / "nothing")
        gated_dir = Path(self.get_temp_dir()) / "gated"
        write_base_run(gated_dir, with_model=False, base_model="/runs/base/model.keras")
        (gated_dir / "model.keras").write_bytes(b"")
        with self.assertRaisesRegex(ValueError, r"already an input-to-output gate run \(on "
                                    r"/runs/base/model.keras\)"):
            input_output_gate_config(gated_dir)
        for fields, message in [({"gate_dropout": 1.0}, r"gate_dropout must be in \[0, 1\)"),
                                ({"gate_embedding_dim": 0}, "gate_embedding_dim must be an "
                                 "integer >= 1"),
                                ({"base_model": ""}, "base_model must be the path")]:
            with self.subTest(fields=fields), self.assertRaisesRegex(ValueError, message):
                configs.ModelConfig(**fields)

    def test_old_config_files_load_with_the_gate_defaults(self):
        fields = json.loads(configs.get_preset("tiny").to_json())
        for name in ("base_model", "gate_embedding_dim", "gate_dropout"):
            del fields["model"][name]
        config = configs.ExperimentConfig.from_json(json.dumps(fields))
        self.assertEqual((config.model.base_model, config.model.gate_embedding_dim,
                          config.model.gate_dropout), (None, 300, 0.5))
        self.assertEqual(config, configs.get_preset("tiny"))


class GatedModelTest(testing.TestCase):

    def setUp(self):
        super().setUp()
        self.base_dir = Path(self.get_temp_dir()) / "base"
        self.base = write_base_run(self.base_dir)
        self.config = input_output_gate_config(self.base_dir, embedding_dim=6, dropout=0.0)

    def test_build_model_wraps_the_trained_model(self):
        model = build_model(self.config.model)
        self.assertIsInstance(model, InputOutputGateLM)
        self.assertIsInstance(model.base_model, PointerSentinelLM)
        self.assertFalse(model.base_model.trainable)
        self.assertEqual((model.num_layers, model.softmax, model.vocab_size, model.window_size),
                         (2, "full", len(WORDS), self.base.model.window_size))
        self.assertEqual(len(model.trainable_variables), 3)  # e', W, b of the gate
        saved = keras.saving.load_model(self.base_dir / "model.keras")
        text = self.rng.integers(0, len(WORDS), size=(1, 8))
        # The wrapped model is the saved one: same scores when the gate passes logits through.
        model.gate.projection.kernel.assign(tf.zeros_like(model.gate.projection.kernel))
        model.gate.projection.bias.assign(tf.fill([len(WORDS)], 50.0))  # sigmoid(50) = 1
        self.assertAllClose(model.score_with_state(text[:, :-1], text[:, 1:])["log_probs"],
                            saved.score_with_state(text[:, :-1], text[:, 1:])["log_probs"],
                            atol=1e-5)

    def test_build_model_refuses_another_model(self):
        cases = [({"vocab_size": 11}, r"does not match the model config \(vocab_size: config "
                  r"11, model 10\)"),
                 ({"hidden_dim": 8, "window_size": 5}, r"hidden_dim: config 8, model 16; "
                  r"window_size: config 5, model 8"),
                 ({"kind": "lstm"}, r"does not match the model config \(kind: config 'lstm' "
                  r"\(LSTMLanguageModel\), model PointerSentinelLM\)"),
                 ({"base_model": str(self.base_dir / "missing.keras")},
                  r"missing.keras' is not a .keras file that exists")]
        for fields, message in cases:
            with self.subTest(fields=fields), self.assertRaisesRegex(
                    (ValueError, FileNotFoundError), message):
                build_model(dataclasses.replace(self.config.model, **fields))
        gated_path = Path(self.get_temp_dir()) / "gated.keras"
        build_model(self.config.model).save(gated_path)
        with self.assertRaisesRegex(ValueError, "already has an input-to-output gate"):
            build_model(dataclasses.replace(self.config.model, base_model=str(gated_path)))

    def test_new_run_takes_the_base_runs_vocabulary(self):
        workdir = Path(self.get_temp_dir()) / "gate_run"
        strategy = tf.distribute.get_strategy()
        config, corpus = run_setup.prepare_workdir(self.config, workdir, strategy)
        run_setup.write_run_files(config, corpus, workdir, strategy)
        self.assertEqual(corpus.vocabulary.tokens, tuple(WORDS))
        self.assertEqual(Vocabulary.load(workdir / "vocab.txt"), Vocabulary(WORDS))
        self.assertEqual(config.model.vocab_size, len(WORDS))
        # Resuming: the run's own vocab.txt, and the same config is accepted.
        (self.base_dir / "vocab.txt").unlink()
        run_setup.prepare_workdir(self.config, workdir, strategy)
        with self.assertRaisesRegex(run_setup.RunRefusedError, r"base/vocab.txt: an "
                                    r"input-to-output gate run reads the vocabulary"):
            run_setup.prepare_workdir(self.config, Path(self.get_temp_dir()) / "other", strategy)

    def test_a_run_with_an_old_config_file_resumes(self):
        workdir = Path(self.get_temp_dir()) / "old_run"
        strategy = tf.distribute.get_strategy()
        config, corpus = run_setup.prepare_workdir(self.base, workdir, strategy)
        run_setup.write_run_files(config, corpus, workdir, strategy)
        fields = json.loads((workdir / "config.json").read_text())
        for name in ("base_model", "gate_embedding_dim", "gate_dropout"):
            del fields["model"][name]
        (workdir / "config.json").write_text(json.dumps(fields))  # written before the fields
        resumed, _ = run_setup.prepare_workdir(config, workdir, strategy)
        self.assertEqual(resumed, config)


if __name__ == "__main__":
    tf.test.main()
