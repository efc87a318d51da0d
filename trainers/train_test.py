"""psmm-train's flags: mapping onto the preset, and bad values refused before anything runs."""

from pathlib import Path

import tensorflow as tf
from absl import app, flags
from absl.testing import flagsaver

from psmm_tf import configs
from psmm_tf.testing import train_in_process
from psmm_tf.trainers import char_output_flags, train

REPO_ROOT = Path(__file__).resolve().parent.parent


def _parse(*args):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["train", *args])
    return train.config_from_flags()


class FlagsToConfigTest(tf.test.TestCase):
    def tearDown(self):
        flags.FLAGS.unparse_flags()
        super().tearDown()

    def test_flags_replace_preset_fields(self):
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", "--preset=medium", "--model=lstm", "--bptt=50",
                            "--dropout=0.25", "--epochs=5", "--pointer_memory=recompute",
                            "--seed=9", "--jit_compile=off", "--window_size=50")
        self.assertEqual(config.model.kind, "lstm")
        self.assertEqual(config.model.hidden_dim, 650)  # from the preset
        self.assertEqual(config.train.num_predicted, 50)
        self.assertEqual(config.model.init_scale, 0.05)  # from the preset
        self.assertEqual((config.model.input_dropout, config.model.hidden_dropout,
                          config.model.output_dropout), (0.25, 0.25, 0.25))
        self.assertEqual(config.train.max_epochs, 5)
        self.assertEqual(config.train.resolved_context_length(config.model.window_size), 49)
        self.assertEqual((config.model.seed, config.train.seed), (9, 9))
        self.assertEqual(config.train.learning_rate, 1.0)

    def test_pointer_clipping_and_the_eq9_weight(self):
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", "--pointer_clip_norm=0.5",
                            "--pointer_loss_weight=0")
        self.assertEqual(config.train.pointer_clip_norm, 0.5)
        self.assertEqual(config.train.pointer_loss_weight, 0.0)
        with flagsaver.flagsaver():  # 0: the paper's one joint norm
            config = _parse("--workdir=/tmp/w", "--pointer_clip_norm=0", "--clip_norm=1")
        self.assertIsNone(config.train.pointer_clip_norm)
        self.assertEqual(config.train.clip_norm, 1.0)

    def test_the_schedule_flags(self):
        with flagsaver.flagsaver():  # Zaremba et al.'s medium schedule
            config = _parse("--workdir=/tmp/w", "--preset=medium", "--lr_decay_from_epoch=6",
                            "--lr_decay=0.8333", "--epochs=39")
        self.assertEqual((config.train.lr_decay_from_epoch, config.train.lr_decay,
                          config.train.max_epochs), (6, 0.8333, 39))
        with flagsaver.flagsaver():  # 0: the paper's, the presets' own
            config = _parse("--workdir=/tmp/w", "--preset=medium", "--lr_decay_from_epoch=0")
        self.assertIsNone(config.train.lr_decay_from_epoch)
        self.assertIsNone(configs.get_preset("medium").train.lr_decay_from_epoch)
        with flagsaver.flagsaver(), self.assertRaisesRegex(flags.IllegalFlagValueError,
                                                           "must be an integer >= 0"):
            _parse("--workdir=/tmp/w", "--lr_decay_from_epoch=-1")

    def test_the_start_flags(self):
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", "--preset=medium", "--init_scale=0",
                            "--warmup_steps=30", "--pointer_warmup_steps=0")
        self.assertIsNone(config.model.init_scale)  # 0: Keras' initialisers
        self.assertEqual(config.train.warmup_steps, 30)
        self.assertEqual(config.train.pointer_warmup_steps, 0)
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", "--preset=small", "--init_scale=0.1")
        self.assertEqual(config.model.init_scale, 0.1)
        self.assertEqual(config.train.warmup_steps, 0)

    def test_gate_calibration_flag(self):
        with flagsaver.flagsaver():
            self.assertTrue(_parse("--workdir=/tmp/w").train.calibrate_gate)  # the presets'
        with flagsaver.flagsaver():
            self.assertFalse(_parse("--workdir=/tmp/w", "--nocalibrate_gate").train.calibrate_gate)
        with flagsaver.flagsaver(), self.assertRaisesRegex(app.UsageError, "calibrate_gate"):
            _parse("--workdir=/tmp/w", "--override=train.calibrate_gate=false")  # has a flag
        with flagsaver.flagsaver(), self.assertRaises(flags.IllegalFlagValueError):
            _parse("--workdir=/tmp/w", "--calibrate_gate=maybe")

    def test_override_sets_fields_without_a_flag_by_their_type(self):
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", "--override=train.keep_checkpoints=7",
                            "--override=model.max_word_length=12",
                            "--override=train.eval_length=50", "--override=model.base_model=none")
        self.assertEqual((config.train.keep_checkpoints, config.model.max_word_length,
                          config.train.eval_length), (7, 12, 50))
        self.assertIsInstance(config.train.keep_checkpoints, int)
        self.assertIsNone(config.model.base_model)
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", "--override=data.synthetic_seed=3")
        self.assertEqual(config.data.synthetic_seed, 3)

    def test_tfds_data_dir_is_a_real_corpus_flag(self):
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", "--dataset=ptb", "--data_dir=/data/ptb",
                            "--tfds_data_dir=/tmp/tfds")
        self.assertEqual((config.data.data_dir, config.data.tfds_data_dir),
                         ("/data/ptb", "/tmp/tfds"))
        with flagsaver.flagsaver(), self.assertRaisesRegex(
                app.UsageError, r"--tfds_data_dir cannot be used with --dataset=synthetic"):
            _parse("--workdir=/tmp/w", "--dataset=synthetic", "--tfds_data_dir=/tmp/tfds")

    def test_bad_overrides_name_the_override(self):
        cases = [
            ("train.nope=1", r"--override=train.nope=1: expected section.field=value"),
            ("optimizer.lr=1", r"expected section.field=value with a field of model, train"),
            ("train.keep_checkpoints", r"expected section.field=value"),
            ("train.keep_checkpoints=many", r"'many' is not an integer"),
            ("train.batch_size=8", r"train.batch_size has its own flag, --batch_size"),
            ("model.input_dropout=0.2", r"has its own flag, --dropout"),
            ("model.switch_units=32", r"model.switch_units has its own flag, --switch_units"),
            ("model.hyperparameters=1", r"expected section.field=value"),
            # The gate run's checks and defaults come with its flags, not around them.
            ("model.base_model=run/model.keras", r"has its own flag, --input_output_gate_on"),
            ("model.gate_dropout=0.3", r"model.gate_dropout has its own flag, --gate_dropout"),
            ("train.keep_checkpoints=0", r"keep_checkpoints must be an integer >= 1, got 0"),
            ("train.eval_length=none", r"'none' is not an integer"),  # not optional
        ]
        for override, message in cases:
            with self.subTest(override=override), flagsaver.flagsaver():
                with self.assertRaisesRegex(app.UsageError, message):
                    _parse("--workdir=/tmp/w", f"--override={override}")

    def test_help_notes_give_each_flags_preset_value(self):
        from psmm_tf.trainers import config_flags

        notes = config_flags.preset_notes("medium")
        medium = configs.get_preset("medium")
        self.assertEqual(notes["num_predicted"],
                         f"default from --preset=medium: {medium.train.num_predicted}")
        self.assertEqual(notes["epochs"], f"default from --preset=medium: "
                                          f"{medium.train.max_epochs}")
        self.assertEqual(notes["pointer_clip_norm"], "default from --preset=medium: "
                                                     f"{medium.train.pointer_clip_norm}")
        self.assertEqual(notes["initial_gate"], "default from --preset=medium: 0")
        self.assertEqual(notes["switch_units"], "default from --preset=medium: 64")
        self.assertEqual(notes["init_scale"], "default from --preset=medium: 0.05")
        self.assertEqual(notes["pointer_warmup_steps"], "default from --preset=medium: 100")
        self.assertEqual(config_flags.preset_notes("tiny")["init_scale"],
                         "default from --preset=tiny: 0")
        self.assertEqual(notes["context_length"],
                         "default from --preset=medium: unset (window_size - 1)")
        # Every config flag has a note, and only those.
        self.assertEqual(set(notes), {spec.name for spec in config_flags.all_flags()})

    def test_model_hyperparameters_have_flags_for_their_kinds(self):
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", "--model=pointer_softmax", "--switch_units=8")
        self.assertEqual((config.model.switch_units, config.model.hyperparameters),
                         (8, {"switch_units": 8}))
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", "--initial_gate=0.25")
        self.assertEqual(config.model.hyperparameters, {"initial_gate": 0.25})
        with flagsaver.flagsaver():
            self.assertIsNone(_parse("--workdir=/tmp/w", "--initial_gate=0").model.initial_gate)

    def test_flags_the_model_reads_are_accepted(self):
        # The counterparts of FlagSweepTest's unused flags: accepted where they are read, and
        # a preset's value (small's pointer_warmup_steps=100) never counts as given.
        for args in [
            ["--pointer_memory=recompute", "--context_length=3"],
            ["--softmax=sampled", "--num_sampled=8"], ["--softmax=cnn", "--num_sampled=8"],
            ["--input_embedding=chars", "--char_cnn_clip_norm=2"],
            ["--model=pointer_softmax", "--pointer_clip_norm=0.5", "--pointer_loss_weight=1",
             "--pointer_warmup_steps=5"],
            ["--compare_baseline", "--pointer_clip_norm=0.5", "--nocalibrate_gate"],
            ["--model=lstm"], ["--model=lstm", "--compare_baseline"],
            ["--strategy=mirrored", "--logical_cpus=2", "--batch_size=4"],
            ["--strategy=mirrored", "--batch_size=3"],  # one device (or a GPU each)
            ["--dataset=text", "--data_dir=/tmp/corpus", "--tfds_data_dir=/tmp/corpus_tfds"],
            ["--max_eval_tokens=2"],
        ]:
            if "--batch_size=3" in args and tf.config.list_physical_devices("GPU"):
                continue
            with self.subTest(args=args), flagsaver.flagsaver():
                _parse("--workdir=/tmp/w", *args)
        with flagsaver.flagsaver():
            self.assertEqual(_parse("--workdir=/tmp/w", "--model=lstm").train.
                             pointer_warmup_steps, 100)

    def test_adam_without_learning_rate_gets_adams_default(self):
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", "--optimizer=adam")
        self.assertEqual(config.train.learning_rate, 1e-3)

    def test_bad_values_name_the_flag(self):
        bad_value = flags.IllegalFlagValueError
        cases = [
            (["--batch_size=0"], bad_value, r"--batch_size=0: must be an integer >= 1"),
            (["--dropout=1.0"], bad_value, r"--dropout=1.0: must be a probability"),
            (["--pointer_memory=stale"], bad_value, r"recompute\|cache"),
            (["--jit_compile=maybe"], bad_value, r"auto\|on\|off"),
            (["--native="], bad_value, r"auto\|on\|off"),
            (["--learning_rate=-1"], bad_value,
             r"--learning_rate=-1.0: must be a finite number > 0"),
            (["--pointer_clip_norm=-1"], bad_value,
             r"--pointer_clip_norm=-1.0: must be a finite number >= 0"),
            (["--pointer_loss_weight=-0.5"], bad_value,
             r"--pointer_loss_weight=-0.5: must be a finite number >= 0"),
            (["--warmup_steps=-3"], bad_value, r"--warmup_steps=-3: must be an integer >= 0"),
            (["--pointer_warmup_steps=-1"], bad_value,
             r"--pointer_warmup_steps=-1: must be an integer >= 0"),
            (["--init_scale=-0.05"], bad_value,
             r"--init_scale=-0.05: must be a finite number >= 0"),
            (["--init_scale=inf"], bad_value, r"--init_scale=inf: must be a finite number >= 0"),
            (["--initial_gate=1.5"], bad_value,
             r"--initial_gate=1.5: must be in \(0, 1\) or 0 \(None\)"),
            (["--switch_units=0"], bad_value, r"--switch_units=0: must be an integer >= 1"),
            (["--switch_units=8"], app.UsageError,
             r"--switch_units is a setting of --model=pointer_softmax, not of --model=psmm"),
            (["--dataset=ptb"], app.UsageError, r"--data_dir is required for --dataset=ptb"),
            (["--window_size=4", "--pointer_memory=recompute", "--context_length=4"],
             app.UsageError, r"--context_length=4 must be < --window_size=4"),
        ]
        for args, error, message in cases:
            with self.subTest(args=args), flagsaver.flagsaver():
                with self.assertRaisesRegex(error, message):
                    _parse("--workdir=/tmp/w", *args)


class NativeSettingsTest(tf.test.TestCase):
    def test_psmm_train_passes_cxx_and_psmm_tf_cache_to_the_library(self):
        from psmm_tf import native
        from psmm_tf.trainers import config_flags

        old = native.settings()
        try:
            config_flags.configure_native({"PSMM_TF_CACHE": "~/kernels", "CXX": "clang++"})
            self.assertEqual((native.settings().cache_dir, native.settings().compiler),
                             ("~/kernels", "clang++"))
            config_flags.configure_native({})  # unset: left as they are
            self.assertEqual(native.settings().compiler, "clang++")
        finally:
            native.configure(mode=old.mode, cache_dir=old.cache_dir, compiler=old.compiler)


class InputOutputGateFlagsTest(tf.test.TestCase):
    def setUp(self):
        super().setUp()
        # A trained run's files (the model file's contents are not read to make the config).
        self.base = Path(self.get_temp_dir()) / "base"
        self.base.mkdir(exist_ok=True)
        base_config = configs.get_preset("tiny").replace(
            model={"vocab_size": 50, "seed": 4},
            train={"seed": 4, "max_epochs": 6, "clip_norm": 0.5},
            data={"dataset": "ptb", "data_dir": "/data/ptb"})
        (self.base / "config.json").write_text(base_config.to_json())
        for name in ("vocab.txt", "model.keras"):
            (self.base / name).write_text("")
        self.base_config = base_config

    def tearDown(self):
        flags.FLAGS.unparse_flags()
        super().tearDown()

    def test_gate_on_a_trained_run(self):
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", f"--input_output_gate_on={self.base}",
                            "--gate_embedding_dim=32", "--gate_dropout=0.2", "--epochs=3",
                            "--data_dir=/moved/corpus")
        self.assertEqual(config.model.base_model, str(self.base / "model.keras"))
        self.assertEqual((config.model.gate_embedding_dim, config.model.gate_dropout), (32, 0.2))
        self.assertEqual((config.model.vocab_size, config.model.hidden_dim, config.model.seed),
                         (50, 16, 4))  # the base run's, not the flags' preset (small)
        self.assertEqual((config.train.optimizer, config.train.learning_rate), ("adam", 1e-3))
        self.assertEqual((config.train.max_epochs, config.train.clip_norm), (3, 0.5))
        self.assertEqual(config.data.data_dir, "/moved/corpus")

    def test_defaults_and_the_users_optimizer(self):
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", f"--input_output_gate_on={self.base}")
        self.assertEqual((config.model.gate_embedding_dim, config.model.gate_dropout), (300, 0.5))
        self.assertEqual(config.train.max_epochs, 6)
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", f"--input_output_gate_on={self.base}",
                            "--learning_rate=0.01", "--seed=8")
        self.assertEqual((config.train.optimizer, config.train.learning_rate), ("adam", 0.01))
        self.assertEqual((config.model.seed, config.train.seed), (8, 8))
        with flagsaver.flagsaver():
            config = _parse("--workdir=/tmp/w", f"--input_output_gate_on={self.base}",
                            "--optimizer=sgd")
        self.assertEqual((config.train.optimizer, config.train.learning_rate), ("sgd", 1.0))

    def test_refused_combinations_name_the_flags(self):
        gate = f"--input_output_gate_on={self.base}"
        cases = [
            ([gate, "--compare_baseline"], app.UsageError,
             r"--compare_baseline cannot be combined with it"),
            ([gate, "--model=lstm", "--hidden_dim=8"], app.UsageError,
             r"--input_output_gate_on trains a gate on that run's model with its corpus and "
             r"settings; --model, --hidden_dim cannot be combined with it"),
            ([gate, "--preset=tiny"], app.UsageError, r"--preset cannot be combined"),
            ([gate, "--dataset=ptb"], app.UsageError, r"--dataset cannot be combined"),
            (["--gate_dropout=0.1"], app.UsageError,
             r"--gate_dropout is only used with --input_output_gate_on"),
            (["--gate_embedding_dim=10"], app.UsageError,
             r"--gate_embedding_dim is only used with --input_output_gate_on"),
            ([gate, "--gate_dropout=1.0"], flags.IllegalFlagValueError,
             r"--gate_dropout=1.0: must be a probability"),
            ([gate, "--gate_embedding_dim=0"], flags.IllegalFlagValueError,
             r"--gate_embedding_dim=0"),
            ([f"--input_output_gate_on={self.base / 'missing'}"], app.UsageError,
             r"--input_output_gate_on=.*missing: .*missing has no config.json"),
        ]
        for args, error, message in cases:
            with self.subTest(args=args), flagsaver.flagsaver():
                with self.assertRaisesRegex(error, message):
                    _parse("--workdir=/tmp/w", *args)


class CharOutputFlagsTest(tf.test.TestCase):
    def tearDown(self):
        flags.FLAGS.unparse_flags()
        super().tearDown()

    def _config(self, *args):
        flags.FLAGS.unparse_flags()
        flags.FLAGS(["train", "--workdir=/tmp/w", *args])
        return char_output_flags.char_output_config(flags.FLAGS)

    def test_flags_set_the_char_output_config(self):
        with flagsaver.flagsaver():
            config = self._config("--char_output_on=/runs/base", "--epochs=3",
                                  "--learning_rate=0.005", "--char_output_units=64",
                                  "--char_output_word_length=20", "--dropout=0.1", "--seed=7",
                                  "--bptt=20", "--data_dir=/moved")
        self.assertEqual(
            (config.base_workdir, config.epochs, config.learning_rate, config.units,
             config.max_word_length, config.dropout, config.seed, config.num_predicted,
             config.data_dir),
            ("/runs/base", 3, 0.005, 64, 20, 0.1, 7, 20, "/moved"))
        with flagsaver.flagsaver():
            config = self._config("--char_output_on=/runs/base")
        self.assertEqual((config.units, config.learning_rate, config.batch_size,
                          config.words_per_update, config.shuffle_words, config.char_dropout),
                         # The library's defaults; the batch is the base run's.
                         (256, 3e-3, None, 128, 200_000, 0.0))
        with flagsaver.flagsaver():
            config = self._config("--char_output_on=/runs/base",
                                  "--char_output_words_per_update=64",
                                  "--char_output_shuffle_words=5000",
                                  "--char_output_char_dropout=0.3")
        self.assertEqual((config.words_per_update, config.shuffle_words, config.char_dropout),
                         (64, 5000, 0.3))

    def test_refused_combinations_name_the_flags(self):
        for args, message in [
            (["--hidden_dim=8", "--model=lstm"], "--model, --hidden_dim cannot be combined"),
            (["--preset=tiny"], "--preset cannot be combined"),
            (["--input_output_gate_on=/runs/x"], "--input_output_gate_on cannot be combined"),
            (["--override=train.seed=3"], "--override cannot be combined"),
        ]:
            with self.subTest(args=args), flagsaver.flagsaver():
                with self.assertRaisesRegex(ValueError, message):
                    self._config("--char_output_on=/runs/base", *args)
        with flagsaver.flagsaver(), self.assertRaisesRegex(
                app.UsageError, "--char_output_units is only used with --char_output_on"):
            _parse("--workdir=/tmp/w", "--char_output_units=8")
        with flagsaver.flagsaver(), self.assertRaisesRegex(
                app.UsageError, "--char_output_char_dropout is only used with --char_output_on"):
            _parse("--workdir=/tmp/w", "--char_output_char_dropout=0.1")
        with flagsaver.flagsaver(), self.assertRaisesRegex(
                flags.IllegalFlagValueError, r"--char_output_char_dropout=1.0: must be a "
                                             r"probability"):
            _parse("--workdir=/tmp/w", "--char_output_on=/runs/base",
                   "--char_output_char_dropout=1.0")


class CommandLineTest(tf.test.TestCase):
    def test_refused_flags_exit_with_the_message_and_write_nothing(self):
        workdir = Path(self.get_temp_dir()) / "never"
        for args, message in [
            (["--window_size=0"], "flag --window_size=0: must be an integer >= 1."),
            (["--dataset=wikitext2"], "--data_dir is required for --dataset=wikitext2"),
            (["--strategy=multi_worker"], "--strategy=multi_worker needs the cluster in TF_CONFIG"),
            (["--input_output_gate_on=/runs/base", "--compare_baseline"],
             "--compare_baseline cannot be combined with it"),
            (["--char_output_on=/runs/none"], "/runs/none"),
            (["--char_output_on=/runs/base", "--strategy=mirrored"],
             "--strategy (it trains on one device) cannot be combined with it"),
        ]:
            with self.subTest(args=args):
                # psmm-train's own main, in this process (a new one per case cost a TensorFlow
                # start each); hostile_flags_test.py runs the program itself.
                code, stderr = train_in_process([f"--workdir={workdir}", *args])
                self.assertIn(message, stderr)
                self.assertNotEqual(code, 0)
                self.assertFalse(workdir.exists())


if __name__ == "__main__":
    tf.test.main()
