"""Each CLI's plain --help: a usage example block, then its own flags with help text.

The programs run as their console scripts run them (`main()` with `sys.argv[0]` the program's
name), in children of the tests' fork server (`psmm_tf.testing.start_program`) started side by
side.
"""

import re
import subprocess
import tempfile
import unittest

from psmm_tf import __version__, configs
from psmm_tf.testing import start_program

TRAIN_FLAGS = (
    "workdir", "preset", "dataset", "data_dir", "tfds_data_dir", "train_split", "valid_split",
    "test_split",
    "min_count", "max_vocab_size", "synthetic_train_tokens", "model", "embedding_dim",
    "input_embedding", "softmax",
    "num_sampled", "hidden_dim", "num_layers", "window_size", "num_predicted", "bptt",
    "pointer_memory", "context_length", "batch_size", "epochs", "steps_per_epoch", "patience",
    "optimizer", "learning_rate", "warmup_steps", "pointer_warmup_steps", "lr_decay",
    "lr_decay_from_epoch", "dropout",
    "zoneout", "clip_norm", "init_scale", "initial_gate", "switch_units",
    "pointer_clip_norm", "char_cnn_clip_norm", "pointer_loss_weight", "[no]calibrate_gate",
    "seed", "jit_compile", "native",
    "mixed_precision",
    "checkpoint_every_steps",
    "max_eval_tokens", "eval_batch_size", "init_from", "override", "strategy", "logical_cpus",
    "[no]compare_baseline",
    "input_output_gate_on", "gate_embedding_dim", "gate_dropout", "char_output_on",
    "char_output_units", "char_output_word_length", "char_output_words_per_update",
    "char_output_shuffle_words", "char_output_char_dropout", "verbose", "[no]restart",
    "[no]version")
PROGRAMS = {
    "psmm-train": ("psmm_tf.trainers.train", TRAIN_FLAGS),
    "psmm-evaluate": ("psmm_tf.trainers.evaluate", (
        "workdir", "baseline_workdir", "split", "model_source", "mixed_precision",
        "[no]trained_gate", "output_dir", "data_dir",
        "tfds_data_dir",
        "max_tokens",
        "batch_size", "length", "num_buckets", "bucket_by", "positions", "num_examples",
        "cache_window", "cache_theta", "cache_lambda", "[no]cache_grid", "cache_thetas",
        "cache_lambdas", "[no]version")),
    "psmm-export": ("psmm_tf.export.export_saved_model", (
        "workdir", "keras_model", "checkpoint", "config", "vocab", "export_base",
        "model_source", "model_version", "max_request_tokens", "model_name", "cache_window",
        "cache_theta", "cache_lambda", "[no]version")),
    "psmm-score": ("psmm_tf.export.score", (
        "model", "rest", "grpc", "model_name", "model_version", "input", "format",
        "[no]independent", "lines_per_request", "timeout", "[no]version")),
}


def start(program, *args):
    return start_program(PROGRAMS[program][0], [program, *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)


def finish(process):
    stdout, stderr = process.communicate(timeout=240)
    return process.returncode, stdout, stderr


class HelpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        runs = {program: start(program, "--help") for program in PROGRAMS}
        runs["medium"] = start("psmm-train", "--preset=medium", "--help")
        runs["version"] = start("psmm-score", "--version")
        cls.binary = tempfile.NamedTemporaryFile(suffix=".flags")  # noqa: SIM115
        cls.binary.write(b"--model=\xff\xfe\n")
        cls.binary.flush()
        runs["binary_flagfile"] = start("psmm-score", f"--flagfile={cls.binary.name}")
        cls.results = {name: finish(process) for name, process in runs.items()}

    @classmethod
    def tearDownClass(cls):
        cls.binary.close()

    def test_help_lists_the_programs_own_flags_with_help_text(self):
        for program, (_, names) in PROGRAMS.items():
            with self.subTest(program=program):
                code, stdout, stderr = self.results[program]
                self.assertEqual(code, 0, stderr[-2000:])
                self.assertNotIn("Try --helpfull to get a list of all flags", stdout)
                self.assertTrue(stdout.startswith(f"{program}: "), stdout[:200])
                # The usage example block comes first, before the description and the flags.
                self.assertLess(stdout.index("Usage examples:"), stdout.index("\nflags:\n"))
                self.assertIn(f"\n  {program} --", stdout)
                flags_part = stdout.split("\nflags:\n", 1)[1]
                listed = {line.split(":", 1)[0].strip()[2:] for line in flags_part.splitlines()
                          if line.startswith("  --")}
                self.assertEqual(listed, set(names))
                for name in names:  # each one with its own text after the name
                    self.assertRegex(flags_part, rf"(?m)^  --{re.escape(name)}: \S")
                self.assertNotIn("--logtostderr", stdout)  # absl's flags: --helpfull only

    def test_preset_defaults_are_named_with_their_value(self):
        small, medium = configs.get_preset("small"), configs.get_preset("medium")
        stdout = self.results["psmm-train"][1]
        self.assertRegex(stdout, r"--num_predicted: [^\n]*\n(    [^\n]*\n)*"
                                 rf"    \(default from --preset=small: "
                                 rf"{small.train.num_predicted}; an integer\)")
        self.assertIn(f"default from --preset=small: {small.model.hidden_dim};", stdout)
        self.assertIn(f"default from --preset=small: {small.data.dataset})", stdout)
        medium_help = self.results["medium"][1]
        self.assertRegex(medium_help, r"--hidden_dim: [^\n]*\n"
                                      rf"    \(default from --preset=medium: "
                                      rf"{medium.model.hidden_dim}; an integer\)")

    def test_a_flagfile_that_is_not_text_is_a_flags_error(self):
        code, _, stderr = self.results["binary_flagfile"]  # was a UnicodeDecodeError traceback
        self.assertEqual(code, 2, stderr[-2000:])
        self.assertRegex(stderr, rf"FATAL Flags error: --flagfile={re.escape(self.binary.name)}: "
                                 r"a flag file that is not text \(.*\); expected a text file of "
                                 r"flags")
        self.assertNotIn("Traceback", stderr)

    def test_version(self):
        code, stdout, _ = self.results["version"]
        self.assertEqual((code, stdout), (0, f"psmm-score (psmm_tf) {__version__}\n"))


if __name__ == "__main__":
    unittest.main()
