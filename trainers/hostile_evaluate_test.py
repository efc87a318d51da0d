"""Hostile inputs (docs/hostile_inputs.md, "psmm-evaluate"): psmm-evaluate on damaged or mismatched
runs: splits, vocabularies, models, report options. Each is refused with a message naming it, and
nothing a user has is touched (every pre-existing file byte-identical afterwards)."""

import json
import shutil
from pathlib import Path

import tensorflow as tf

from psmm_tf import testing as psmm_testing  # its TrainedRunTestCase: no tests of its own
from psmm_tf import workdir as run_files
from psmm_tf.evaluation import report, trained_run
from psmm_tf.testing import run_script, snapshot, tiny_config, truncate, write_text_corpus
from psmm_tf.training import run_setup, train_lib


class EvaluateSplitTest(psmm_testing.TrainedRunTestCase):
    def test_split_without_a_file_or_a_baseline_of_another_vocabulary_is_refused(self):
        root = Path(self.get_temp_dir())
        data = write_text_corpus(root / "no_test_split")
        (data / "test.txt").unlink()
        workdir = root / "text_run"
        train_lib.run(tiny_config(steps_per_epoch=2).replace(
            data={"dataset": "text", "data_dir": str(data)}), workdir, verbose=0)
        before = snapshot(workdir)
        with self.assertRaisesRegex(trained_run.RunLoadError,
                                    r"split='test': the corpus of .*text_run has no file for it "
                                    r"\(it has \['train', 'valid'\]\)"):
            report.evaluation_report(workdir, workdir / "evaluation_test", "test")
        self.assertEqual(snapshot(workdir), before)  # no evaluation_test/ either
        run = self.copy_run("eval_with_baseline")
        run_before = snapshot(run)
        with self.assertRaisesRegex(trained_run.RunLoadError,
                                    r"baseline_workdir=.*text_run has another vocabulary"):
            report.evaluation_report(run, root / "report", "valid", max_tokens=50,
                                                baseline_workdir=workdir)
        self.assertEqual(snapshot(run), run_before)
        self.assertEqual(snapshot(workdir), before)


class ReportFolderTest(psmm_testing.TrainedRunTestCase):
    def test_a_report_replaces_an_earlier_one_whole_and_a_failed_one_leaves_it(self):
        run = self.copy_run("reported")
        output_dir = Path(self.get_temp_dir()) / "report"
        output_dir.mkdir()
        (output_dir / "notes.txt").write_text("mine\n")
        with_baseline = report.evaluation_report(run, output_dir, "valid", max_tokens=50,
                                                 baseline_workdir=self.base)
        self.assertIn("frequency_buckets", with_baseline)
        self.assertTrue((output_dir / "frequency_buckets.md").is_file())
        first = snapshot(output_dir)
        # A failing report (a baseline of another kind of folder) leaves the earlier one.
        with self.assertRaisesRegex(trained_run.RunLoadError, "notes.txt"):
            report.evaluation_report(run, output_dir, "valid", max_tokens=50,
                                     baseline_workdir=output_dir / "notes.txt")
        self.assertEqual(snapshot(output_dir), first)
        # A report without a baseline replaces the earlier one, Figure 4 files included.
        report.evaluation_report(run, output_dir, "valid", max_tokens=50)
        self.assertEqual(sorted(p.name for p in output_dir.iterdir()),
                         ["attention.html", "metrics.json", "notes.txt"])
        metrics = json.loads((output_dir / "metrics.json").read_text())
        self.assertNotIn("baseline_workdir", metrics)
        self.assertEqual((output_dir / "notes.txt").read_text(), "mine\n")
        # Files of a report's names in a folder that held no report are the user's: kept.
        mine = Path(self.get_temp_dir()) / "paper"
        mine.mkdir()
        (mine / "frequency_buckets.md").write_text("my table\n")
        report.evaluation_report(run, mine, "valid", max_tokens=50)
        self.assertEqual((mine / "frequency_buckets.md").read_text(), "my table\n")
        # A folder where the report writes a file is refused before the run is read.
        (output_dir / "attention.html").unlink()
        (output_dir / "attention.html").mkdir()
        before = snapshot(output_dir)
        with self.assertRaisesRegex(trained_run.RunLoadError,
                                    r"output_dir=.*report holds a folder attention.html"):
            report.evaluation_report(run, output_dir, "valid", max_tokens=50)
        self.assertEqual(snapshot(output_dir), before)


class VocabularyTest(psmm_testing.TrainedRunTestCase):
    def test_permuted_vocabulary_is_refused_where_it_meets_the_model(self):
        workdir = self.copy_run("permuted")
        vocab = workdir / "vocab.txt"
        tokens = vocab.read_text().splitlines()
        tokens[2], tokens[3] = tokens[3], tokens[2]
        vocab.write_text("".join(t + "\n" for t in tokens))
        before = snapshot(workdir)
        message = r"Vocabulary .*permuted/vocab.txt is not the one the model of .* trained with"
        with self.assertRaisesRegex(trained_run.RunLoadError, message):
            trained_run.load_trained_run(workdir)
        with self.assertRaisesRegex(run_setup.RunRefusedError, message):
            train_lib.run(tiny_config(), workdir, verbose=0)
        self.assertEqual(snapshot(workdir), before)
        self.assertTrue(run_files.check_vocabulary(self.base / "vocab.txt", self.base))


class EvaluateSweepTest(psmm_testing.TrainedRunTestCase):
    def test_damaged_models_and_bad_report_options_are_errors_naming_them(self):
        root = Path(self.get_temp_dir())
        cut_model = self.copy_run("cut_model")
        truncate(cut_model / "model.keras", 3000)
        no_model = self.copy_run("all_checkpoints_cut")
        (no_model / "model.keras").unlink()
        for data in (no_model / "checkpoints").glob("*.data-*"):
            truncate(data)
        nothing = self.copy_run("no_model_at_all")
        (nothing / "model.keras").unlink()
        shutil.rmtree(nothing / "checkpoints")
        good = self.copy_run("good_run")
        says_lstm = self.copy_run("config_says_lstm")  # the check reads the run's config
        config = json.loads((says_lstm / "config.json").read_text())
        config["model"]["kind"] = "lstm"
        (says_lstm / "config.json").write_text(json.dumps(config))
        a_file = root / "report_is_a_file"
        a_file.write_text("mine\n")
        for run, options, message in [
            (cut_model, {}, r"cut_model/model.keras cannot be read as a .keras model \(truncated"),
            (no_model, {}, r"all_checkpoints_cut holds no model.keras .*use model_source=latest"),
            (no_model, {"model_source": "latest"},
             r"No checkpoint of .*all_checkpoints_cut/checkpoints can be read: "
             r".*ckpt-12: IndexError"),
            (nothing, {"model_source": "latest"}, r"no_model_at_all holds no checkpoint"),
            (good, {"output_dir": a_file}, r"output_dir=.*report_is_a_file is a file"),
            # Its model.keras is a PSMM (refused: not the config's model); its checkpoint,
            # built as the config's LSTM, has no pointer to show.
            (says_lstm, {"positions": [3]}, r"config_says_lstm/model.keras is not the model its "
                                            r"run's config describes \(kind: config 'lstm'"),
            (says_lstm, {"positions": [3], "model_source": "latest"},
             r"positions=\[3\]: the model of .*config_says_lstm \(lstm\) has no pointer"),
            (good, {"positions": [10**6]}, r"positions=\[1000000\]: \[1000000\] outside the 49 "
                                            r"targets of split='valid'"),
            # np.array_split made that many arrays (memory without end for 10**12).
            (good, {"num_buckets": 10**12},
             r"num_buckets=1000000000000: expected 1 to the \d+ words of the vocabulary"),
        ]:
            with self.subTest(run=run.name, options=options):
                before = snapshot(run)
                output_dir = options.pop("output_dir", run / "report")
                with self.assertRaisesRegex(trained_run.RunLoadError, message):
                    report.evaluation_report(run, output_dir, "valid", max_tokens=50,
                                                        **options)
                self.assertEqual(snapshot(run), before)
        self.assertEqual(a_file.read_text(), "mine\n")
        # Windows and streams past the split's 49 targets are padding: cut by the Evaluator,
        # the same scores (the padding of a 10**9-token window did not fit in memory).
        small = report.evaluation_report(good, root / "small_windows", "valid", max_tokens=50,
                                         length=7, batch_size=1)
        huge = report.evaluation_report(good, root / "huge_windows", "valid", max_tokens=50,
                                        length=10**9, batch_size=10**9)
        wide = report.evaluation_report(good, root / "one_per_stream", "valid", max_tokens=50,
                                        length=1, batch_size=49)
        self.assertAllClose(huge["perplexity"], wide["perplexity"], rtol=1e-5)
        self.assertNotAllClose(huge["perplexity"], small["perplexity"])  # without context
        with self.assertRaisesRegex(ValueError, "batch_size must be >= 1, got 0"):
            report.evaluation_report(good, root / "no_streams", "valid", max_tokens=50,
                                     batch_size=0)
        done = run_script("trainers/evaluate.py", [f"--workdir={cut_model}", "--max_tokens=50"])
        self.assertEqual(done.returncode, 1)
        self.assertRegex(done.stderr, r"FATAL .*cut_model/model.keras cannot be read")
        self.assertNotIn("Traceback", done.stderr)


if __name__ == "__main__":
    tf.test.main()
