"""psmm-train's flags: mapping onto the preset, and bad values refused before anything runs."""

from pathlib import Path

import tensorflow as tf
from absl import app, flags
from absl.testing import flagsaver

from psmm_tf.testing import run_in_fresh_process
from trainers import train

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
            config = _parse("--workdir=/tmp/w", "--preset=medium", "--model=lstm", "--bptt=35",
                            "--dropout=0.25", "--epochs=5", "--pointer_memory=recompute",
                            "--seed=9", "--jit_compile=off", "--window_size=50")
        self.assertEqual(config.model.kind, "lstm")
        self.assertEqual(config.model.hidden_dim, 650)  # from the preset
        self.assertEqual(config.train.num_predicted, 35)
        self.assertEqual((config.model.input_dropout, config.model.hidden_dropout,
                          config.model.output_dropout), (0.25, 0.25, 0.25))
        self.assertEqual(config.train.max_epochs, 5)
        self.assertEqual(config.train.resolved_context_length(config.model.window_size), 49)
        self.assertEqual((config.model.seed, config.train.seed), (9, 9))
        self.assertEqual(config.train.learning_rate, 1.0)

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
            (["--learning_rate=-1"], bad_value, r"--learning_rate=-1.0: must be > 0"),
            (["--dataset=ptb"], app.UsageError, r"--data_dir is required for --dataset=ptb"),
            (["--window_size=4", "--pointer_memory=recompute", "--context_length=4"],
             app.UsageError, r"--context_length=4 must be < --window_size=4"),
        ]
        for args, error, message in cases:
            with self.subTest(args=args), flagsaver.flagsaver():
                with self.assertRaisesRegex(error, message):
                    _parse("--workdir=/tmp/w", *args)


class CommandLineTest(tf.test.TestCase):
    def test_refused_flags_exit_with_the_message_and_write_nothing(self):
        workdir = Path(self.get_temp_dir()) / "never"
        for args, message in [
            (["--window_size=0"], "flag --window_size=0: must be an integer >= 1."),
            (["--dataset=wikitext2"], "--data_dir is required for --dataset=wikitext2"),
            (["--strategy=multi_worker"], "--strategy=multi_worker needs the cluster in TF_CONFIG"),
        ]:
            code = f"""
                import os, sys
                sys.stderr = sys.stdout
                os.environ.pop("TF_CONFIG", None)
                sys.argv = ["psmm-train", "--workdir={workdir}", *{args!r}]
                from trainers import train
                try:
                    train.main()
                except SystemExit as exit:
                    print("EXIT", exit.code)
                print("TF_IMPORTED", "tensorflow" in sys.modules)
            """
            out = run_in_fresh_process(code, timeout=60)
            self.assertIn(message, out)
            self.assertNotIn("EXIT 0", out)
            self.assertIn("TF_IMPORTED False", out)  # refused before TensorFlow even loads
            self.assertFalse(workdir.exists())


if __name__ == "__main__":
    tf.test.main()
