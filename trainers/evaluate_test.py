"""psmm-evaluate on tiny runs: the printed perplexity, the report files, and refused flags."""

import json
import re
from pathlib import Path

import tensorflow as tf

from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.evaluation.trained_run import load_trained_run
from psmm_tf.testing import mains_in_one_process, run_script, snapshot, trained_tiny_run


def _evaluate(*args):
    return run_script("trainers/evaluate.py", args)


# Refused cache flags and their messages: refused before the workdir is even read.
BAD_CACHE_FLAGS = [
    (["--cache_window=0"], "flag --cache_window=0: must be an integer >= 1"),
    (["--cache_window=20000000"],
     "--cache_window must be at most 100,000 (each stream holds the last"),
    (["--cache_window=5", "--cache_theta=-0.5"], "flag --cache_theta=-0.5: must be >= 0"),
    (["--cache_window=5", "--cache_lambda=1.5"],
     r"flag --cache_lambda=1.5: must be in [0, 1)"),
    (["--cache_window=5", "--cache_lambda=-0.1"],
     r"flag --cache_lambda=-0.1: must be in [0, 1)"),
    (["--cache_window=5", "--cache_lambda=1.0"],
     r"flag --cache_lambda=1.0: must be in [0, 1) (at 1 every word"),
    (["--cache_window=5", "--cache_grid", "--cache_lambdas=0.1,1"],
     "--cache_lambdas must be a comma-separated list of lambdas in [0, 1), got '0.1,1'"),
    (["--cache_window=5", "--cache_theta=inf"],
     "--cache_theta must be a finite number >= 0 (the flatness of the cache distribution"),
    (["--cache_window=5", "--cache_grid", "--cache_thetas=0.1,inf"],
     "--cache_thetas must be a finite number >= 0"),
    (["--cache_grid"], "--cache_grid given without --cache_window"),
    (["--cache_theta=0.3", "--cache_lambda=0.1"],
     "--cache_theta, --cache_lambda given without --cache_window"),
    (["--cache_window=5", "--cache_grid", "--cache_thetas=0.1,-2"],
     "--cache_thetas must be a comma-separated list of thetas >= 0, got '0.1,-2'"),
    (["--cache_window=5", "--cache_grid", "--cache_lambdas=0.1,x"],
     "--cache_lambdas must be a comma-separated list of lambdas in [0, 1)"),
    (["--cache_window=5", "--cache_grid", "--cache_theta=0.3"],
     "--cache_theta cannot be combined with --cache_grid"),
    (["--cache_window=5", "--cache_lambdas=0.1"],
     "--cache_lambdas given without --cache_grid"),
]


class EvaluateCommandTest(tf.test.TestCase):
    def test_report_of_a_run_against_its_baseline(self):
        # The tests' shared tiny runs (one trained corpus and vocabulary), read, not written.
        psmm, lstm = trained_tiny_run("psmm"), trained_tiny_run("lstm")
        before = snapshot(psmm), snapshot(lstm)
        base = Path(self.get_temp_dir())
        out = base / "report"
        done = _evaluate(f"--workdir={psmm}", f"--baseline_workdir={lstm}",
                         "--split=valid", "--max_tokens=400", f"--output_dir={out}",
                         "--positions=3,150,398", "--length=37")
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        printed = float(re.search(r"psmm valid perplexity ([\d.]+) \(399 targets\)",
                                  done.stdout).group(1))
        run = load_trained_run(psmm)
        expected = Evaluator(run.model, length=11).evaluate(run.corpus.ids["valid"], max_tokens=400)
        self.assertAllClose(printed, expected.perplexity, atol=0.006)
        metrics = json.loads((out / "metrics.json").read_text())
        self.assertAllClose(metrics["perplexity"], expected.perplexity, rtol=1e-6)
        self.assertEqual(metrics["attention_positions"], [3, 150, 398])
        self.assertIn("| 10 |", (out / "frequency_buckets.md").read_text())
        self.assertTrue((out / "frequency_buckets.png").is_file())
        self.assertEqual((out / "attention.html").read_text().count("class='example'"), 3)
        self.assertEqual((snapshot(psmm), snapshot(lstm)), before)


class MixedPrecisionTest(tf.test.TestCase):
    def test_a_run_scored_under_another_dtype_policy(self):
        # The same float32 weights computing in bfloat16: close to float32's perplexity, not
        # equal to it (the policy took effect), and named in the report.
        from psmm_tf.evaluation import evaluate_lib

        psmm = trained_tiny_run("psmm")
        before = snapshot(psmm)
        as_trained = load_trained_run(psmm)
        bf16 = load_trained_run(psmm, mixed_precision="mixed_bfloat16")
        self.assertEqual(bf16.config.train.mixed_precision, "mixed_bfloat16")
        self.assertEqual(bf16.model.backbone.dtype_policy.compute_dtype, "bfloat16")
        self.assertEqual(len(bf16.model.weights), len(as_trained.model.weights))
        for new, old in zip(bf16.model.weights, as_trained.model.weights):
            self.assertAllEqual(new.numpy(), old.numpy())
        ids = as_trained.corpus.ids["valid"]
        exact = Evaluator(as_trained.model, length=11).evaluate(ids, max_tokens=300).perplexity
        rounded = Evaluator(bf16.model, length=11).evaluate(ids, max_tokens=300).perplexity
        self.assertNotEqual(rounded, exact)
        self.assertAllClose(rounded, exact, rtol=0.02)
        self.assertIs(load_trained_run(psmm, mixed_precision="float32").model.__class__,
                      as_trained.model.__class__)
        out = Path(self.get_temp_dir()) / "bf16_report"
        lines = evaluate_lib.run_evaluation(psmm, split="valid", output_dir=out, max_tokens=300,
                                            mixed_precision="mixed_bfloat16")
        metrics = json.loads((out / "metrics.json").read_text())
        self.assertEqual(metrics["mixed_precision"], "mixed_bfloat16")
        # (another evaluation length than the Evaluator's above: bfloat16 rounds otherwise)
        self.assertAllClose(metrics["perplexity"], rounded, rtol=1e-3)
        self.assertIn(f"{metrics['perplexity']:.2f}", "\n".join(lines))
        self.assertEqual(snapshot(psmm), before)


    def test_a_calibrated_run_scored_with_its_gate_as_trained(self):
        from psmm_tf.evaluation import evaluate_lib
        from psmm_tf.evaluation.trained_run import RunLoadError

        psmm, lstm = trained_tiny_run("psmm"), trained_tiny_run("lstm")
        before = snapshot(psmm)
        run = load_trained_run(psmm)
        calibration = run.model.pointer.gate_calibration
        self.assertIsNotNone(calibration)  # psmm-train's default: fitted on valid
        ids = run.corpus.ids["valid"]
        calibrated = Evaluator(run.model, length=11).evaluate(ids, max_tokens=300).perplexity
        run.model.set_gate_calibration(None)
        trained = Evaluator(run.model, length=11).evaluate(ids, max_tokens=300).perplexity
        self.assertNotAlmostEqual(trained, calibrated, places=3)
        reports = {}
        for trained_gate in (False, True):
            out = Path(self.get_temp_dir()) / f"trained_gate_{trained_gate}"
            lines = evaluate_lib.run_evaluation(psmm, split="valid", output_dir=out,
                                                max_tokens=300, trained_gate=trained_gate)
            reports[trained_gate] = json.loads((out / "metrics.json").read_text()), lines
        (as_calibrated, _), (as_trained, lines) = reports[False], reports[True]
        self.assertAllClose(as_calibrated["perplexity"], calibrated, rtol=1e-5)
        self.assertAllClose(as_calibrated["gate_calibration"], list(calibration))
        self.assertAllClose(as_trained["perplexity"], trained, rtol=1e-5)
        self.assertIsNone(as_trained["gate_calibration"])
        self.assertIn("gate: as trained", "\n".join(lines))
        self.assertEqual(snapshot(psmm), before)  # model.keras keeps its calibration
        with self.assertRaisesRegex(RunLoadError, r"trained_gate: the model of .* \(lstm\) has "
                                                  r"no sentinel gate"):
            from psmm_tf.evaluation import report

            report.evaluation_report(lstm, Path(self.get_temp_dir()) / "lstm", "valid",
                                     max_tokens=300, trained_gate=True)


class RefusedCommandLineTest(tf.test.TestCase):
    """psmm-evaluate's main on refused command lines, all in one new process (its flags share
    names with psmm-train's, imported in this one): one TensorFlow start instead of one per
    command line; the report test above runs the program itself."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.workdir = Path(tf.compat.v1.test.get_temp_dir()) / "no_run"
        cls.workdir.mkdir(exist_ok=True)
        # A run folder whose config.json is a folder.
        cls.misplaced = Path(tf.compat.v1.test.get_temp_dir()) / "misplaced_config"
        (cls.misplaced / "config.json").mkdir(parents=True, exist_ok=True)
        command_lines = [[f"--workdir={cls.workdir}", *args] for args in
                         [[], ["--split=dev"], *[args for args, _ in BAD_CACHE_FLAGS]]]
        results = mains_in_one_process(
            "psmm_tf.trainers.evaluate",
            [["psmm-evaluate", *args] for args in
             [*command_lines, [f"--workdir={cls.misplaced}"]]])
        cls.no_run, cls.bad_split, *cls.bad_cache, cls.config_folder = results

    def test_refuses_a_folder_without_a_run(self):
        code, stderr = self.no_run
        self.assertNotEqual(code, 0)
        self.assertIn("has no config.json; expected the folder of a training run", stderr)
        code, stderr = self.bad_split
        self.assertNotEqual(code, 0)
        self.assertIn("flag --split=dev: value should be one of <train|valid|test>", stderr)
        code, stderr = self.config_folder
        self.assertNotEqual(code, 0)
        self.assertIn("misplaced_config/config.json is not a file: expected the run's "
                      "config.json.", stderr)
        self.assertTrue((self.misplaced / "config.json").is_dir())

    def test_refuses_bad_cache_flags_naming_the_flag(self):
        for (args, message), (code, stderr) in zip(BAD_CACHE_FLAGS, self.bad_cache,
                                                    strict=True):
            with self.subTest(args=args):
                self.assertNotEqual(code, 0)
                self.assertIn(message, stderr)
                self.assertNotIn("has no config.json", stderr)


if __name__ == "__main__":
    tf.test.main()
