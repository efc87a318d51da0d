"""Hostile inputs (issue 15): each is refused with a message naming it, and nothing a user has
is touched (every pre-existing file byte-identical afterwards)."""

import contextlib
import gzip
import http.server
import io
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
from train_testlib import tiny_config

from psmm_tf import configs
from psmm_tf import workdir as run_files
from psmm_tf.data import corpus_setup
from psmm_tf.evaluation import NeuralCache, report, trained_run
from psmm_tf.export import score, testing
from psmm_tf.export.clients import LocalClient, RestClient, ServingError
from psmm_tf.export.serving_module import DEFAULT_MAX_TOKENS, ServingModule
from psmm_tf.testing import REPO_ROOT, child_env, run_script
from psmm_tf.training import checkpointing, reporting, run_setup, train_lib


def snapshot(directory):
    """{relative path: bytes} of every file under `directory`."""
    directory = Path(directory)
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def write_text_corpus(directory):
    """A user's corpus folder: train.txt.gz, valid.txt, test.txt and a vocab.txt of theirs."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    line = "the cat sat on the mat and the dog sat on the log .\n"
    with gzip.open(directory / "train.txt.gz", "wt") as f:
        f.write(line * 200)
    (directory / "valid.txt").write_text(line * 10)
    (directory / "test.txt").write_text(line * 10)
    (directory / "vocab.txt").write_text("<unk>\n<eos>\nthe\ncat\n")
    return directory


class _TrainedRunTestCase(tf.test.TestCase):
    """One tiny synthetic run (12 steps, checkpoints 5, 10, 12), copied by each test."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.base = Path(tf.compat.v1.test.get_temp_dir()) / "hostile_base_run"
        if not (cls.base / "results.json").is_file():
            shutil.rmtree(cls.base, ignore_errors=True)
            train_lib.run(tiny_config(), cls.base, verbose=0)

    def copy_run(self, name):
        workdir = Path(self.get_temp_dir()) / name
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.copytree(self.base, workdir)
        return workdir


class DataDirTest(_TrainedRunTestCase):
    def test_train_data_dir_without_dataset_is_refused_before_anything_is_written(self):
        data = write_text_corpus(Path(self.get_temp_dir()) / "user_corpus")
        other_run = self.copy_run("other_run")
        for data_dir, args, message in [
            (data, [], r"--data_dir=.*user_corpus is refused: --dataset is not given"),
            (data, ["--dataset=synthetic"], r"--data_dir=.* is refused: --dataset=synthetic"),
            (other_run, [], r"--data_dir=.*other_run is refused: --dataset is not given"),
        ]:
            with self.subTest(data_dir=data_dir, args=args):
                before = snapshot(data_dir)
                workdir = Path(self.get_temp_dir()) / "never"
                done = run_script("trainers/train.py", [f"--workdir={workdir}",
                                                        f"--data_dir={data_dir}", *args])
                self.assertNotEqual(done.returncode, 0)
                self.assertRegex(done.stderr, message)
                if not args:
                    self.assertIn("--dataset=ptb|wikitext2|wikitext103|text", done.stderr)
                self.assertEqual(snapshot(data_dir), before)
                self.assertFalse(workdir.exists())

    def test_synthetic_corpus_is_never_written_into_a_data_dir(self):
        data = write_text_corpus(Path(self.get_temp_dir()) / "user_corpus2")
        before = snapshot(data)
        config = tiny_config().replace(data={"data_dir": str(data)})
        workdir = Path(self.get_temp_dir()) / "lib_run"
        with self.assertRaisesRegex(run_setup.RunRefusedError,
                                    r"data_dir=.*user_corpus2 was given with dataset='synthetic'"):
            train_lib.run(config, workdir, verbose=0)
        self.assertEqual(snapshot(data), before)
        self.assertFalse(workdir.exists())

    def test_evaluate_data_dir_on_a_synthetic_run_writes_nothing(self):
        data = write_text_corpus(Path(self.get_temp_dir()) / "user_corpus3")
        (data / "train.txt.gz").unlink()  # the case that made the generator write there
        run = self.copy_run("eval_run")
        before, run_before = snapshot(data), snapshot(run)
        with self.assertRaisesRegex(trained_run.RunLoadError,
                                    r"data_dir=.*user_corpus3: the run .* synthetic corpus"):
            trained_run.load_trained_run(run, data_dir=data)
        done = run_script("trainers/evaluate.py", [f"--workdir={run}", f"--data_dir={data}"])
        self.assertNotEqual(done.returncode, 0)
        self.assertRegex(done.stderr, r"FATAL data_dir=.*user_corpus3")
        self.assertNotIn("Traceback", done.stderr)
        self.assertEqual(snapshot(data), before)
        self.assertEqual(snapshot(run), run_before)


class FailedStartTest(_TrainedRunTestCase):
    def test_a_refused_start_leaves_nothing_that_blocks_the_corrected_command(self):
        workdir = Path(self.get_temp_dir()) / "fresh"
        too_big = tiny_config(batch_size=1000)
        with self.assertRaisesRegex(run_setup.RunRefusedError,
                                    r"'train' in .*synthetic_data\) has \d+ tokens: too few for "
                                    r"batch_size=1000"):
            train_lib.run(too_big, workdir, verbose=0)
        for name in ("config.json", "vocab.txt", "vocab.sha256", ".lock"):
            self.assertFalse((workdir / name).exists(), name)
        results = train_lib.run(tiny_config(steps_per_epoch=3), workdir, verbose=0)
        self.assertEqual(results["global_step"], 3)

    def test_one_line_training_file_is_refused_naming_it(self):
        data = Path(self.get_temp_dir()) / "one_line"
        data.mkdir(exist_ok=True)
        (data / "train.txt").write_text("just one short line\n")
        (data / "valid.txt").write_text("a b c d\n")
        workdir = Path(self.get_temp_dir()) / "one_line_run"
        config = tiny_config().replace(data={"dataset": "text", "data_dir": str(data)})
        with self.assertRaisesRegex(run_setup.RunRefusedError,
                                    r"training split \('train' in .*one_line\) has 5 tokens"):
            train_lib.run(config, workdir, verbose=0)
        self.assertFalse((workdir / "config.json").exists())

    def test_bad_corpus_folders_are_refused_naming_them(self):
        root = Path(self.get_temp_dir())
        a_file = root / "corpus_is_a_file"
        a_file.write_text("not a folder\n")
        text_layout = write_text_corpus(root / "text_layout")
        empty = root / "empty_train"
        empty.mkdir(exist_ok=True)
        (empty / "train.txt").write_text("")
        (empty / "valid.txt").write_text("a b c\n")
        for dataset, data_dir, message in [
            ("text", root / "missing", r"data_dir=.*missing\): Corpus directory not found"),
            ("text", a_file, r"data_dir=.*corpus_is_a_file\)"),
            ("ptb", text_layout, r"dataset='ptb', data_dir=.*text_layout\): .*ptb"),
            ("text", empty, r"Corpus file .*empty_train/train.txt is empty"),
        ]:
            with self.subTest(dataset=dataset, data_dir=data_dir):
                before = snapshot(data_dir) if data_dir.is_dir() else None
                workdir = root / f"run_{data_dir.name}"
                config = tiny_config().replace(data={"dataset": dataset,
                                                     "data_dir": str(data_dir)})
                with self.assertRaisesRegex(run_setup.RunRefusedError, message):
                    train_lib.run(config, workdir, verbose=0)
                self.assertFalse(workdir.exists())
                if before is not None:
                    self.assertEqual(snapshot(data_dir), before)
        self.assertEqual(a_file.read_text(), "not a folder\n")

    def test_lost_config_resumed_with_other_flags_writes_no_config(self):
        workdir = self.copy_run("lost_config")
        (workdir / "config.json").unlink()
        before = snapshot(workdir)
        with self.assertRaisesRegex(checkpointing.CheckpointRestoreError,
                                    r"ckpt-12: .*another model"):
            train_lib.run(tiny_config().replace(model={"hidden_dim": 24}), workdir, verbose=0)
        self.assertFalse((workdir / "config.json").exists())
        after = snapshot(workdir)
        self.assertEqual({k: after[k] for k in before}, before)
        # The corrected command (the run's own settings) resumes it.
        results = train_lib.run(tiny_config(), workdir, verbose=0)
        self.assertEqual(results["global_step"], 12)
        self.assertTrue((workdir / "config.json").is_file())


class OtherBackendTest(_TrainedRunTestCase):
    def test_the_programs_refuse_a_jax_backend_up_front(self):
        # Issue 27: `KERAS_BACKEND=jax psmm-train` ended in a TensorFlow Checkpoint traceback.
        workdir = self.copy_run("jax_backend")
        before = snapshot(workdir)
        root = Path(self.get_temp_dir())
        programs = {
            "psmm-train": ("trainers/train.py", ["--preset=tiny", "--dataset=synthetic",
                                                 f"--workdir={root / 'jax_new_run'}"]),
            "psmm-evaluate": ("trainers/evaluate.py", [f"--workdir={workdir}"]),
            "psmm-export": ("export/export_saved_model.py",
                            [f"--workdir={workdir}", f"--export_base={root / 'jax_export'}"]),
        }
        for program, (script, args) in programs.items():
            with self.subTest(program=program):
                done = run_script(script, args, env={"KERAS_BACKEND": "jax"})
                self.assertEqual(done.returncode, 1, done.stderr[-2000:])
                self.assertIn(f"FATAL {program} runs on Keras' TensorFlow backend", done.stderr)
                self.assertIn("the Keras backend is 'jax' (KERAS_BACKEND)", done.stderr)
        self.assertEqual(snapshot(workdir), before)
        self.assertFalse((root / "jax_new_run").exists())
        self.assertFalse((root / "jax_export").exists())


class WorkdirLockTest(_TrainedRunTestCase):
    def test_second_run_on_a_workdir_in_use_is_refused(self):
        workdir = self.copy_run("busy")
        with run_setup.workdir_lock(workdir) as lock:
            self.assertEqual(lock.read_text(), f"{os.getpid()}\n")
            before = snapshot(workdir)
            with self.assertRaisesRegex(run_setup.WorkdirLockedError,
                                        rf"busy is in use by another run \(pid {os.getpid()}, "
                                        rf"lock file .*busy/\.lock\)"):
                train_lib.run(tiny_config(), workdir, verbose=0)
            done = run_script("trainers/train.py", [
                f"--workdir={workdir}", "--preset=tiny", "--synthetic_train_tokens=4000",
                "--steps_per_epoch=12", "--epochs=1", "--checkpoint_every_steps=5",
                "--max_eval_tokens=300"])
            self.assertNotEqual(done.returncode, 0)
            self.assertRegex(done.stderr, rf"FATAL The workdir .*busy is in use by another run "
                                          rf"\(pid {os.getpid()}")
            self.assertNotIn("Traceback", done.stderr)
            self.assertEqual(snapshot(workdir), before)
        self.assertFalse((workdir / ".lock").exists())

    def test_lock_of_a_killed_run_is_taken_over_saying_so(self):
        workdir = Path(self.get_temp_dir()) / "killed_holder"
        workdir.mkdir(exist_ok=True)
        code = ("import sys, time\nfrom psmm_tf.training import run_setup\n"
                f"with run_setup.workdir_lock({str(workdir)!r}):\n"
                "    print('locked', flush=True)\n    time.sleep(120)\n")
        env = child_env()
        holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=env)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "locked")
            with self.assertRaisesRegex(run_setup.WorkdirLockedError, rf"pid {holder.pid}"):
                with run_setup.workdir_lock(workdir):
                    pass
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait()
        self.assertEqual((workdir / ".lock").read_text(), f"{holder.pid}\n")  # left behind
        with self.assertLogs(level="WARNING") as logs:
            with run_setup.workdir_lock(workdir) as lock:
                self.assertEqual(lock.read_text(), f"{os.getpid()}\n")
        self.assertRegex("\n".join(logs.output),
                         rf"Took over the lock file .*killed_holder/\.lock of pid {holder.pid}")

    def test_workdir_that_is_a_file_is_refused(self):
        path = Path(self.get_temp_dir()) / "a_file"
        path.write_text("mine\n")
        with self.assertRaisesRegex(run_setup.RunRefusedError, r"a_file is a file; expected a "
                                                               r"folder"):
            train_lib.run(tiny_config(), path, verbose=0)
        with self.assertRaisesRegex(run_setup.RunRefusedError,
                                    r"Cannot create the workdir .*a_file/run: Not a directory"):
            train_lib.run(tiny_config(), path / "run", verbose=0)
        self.assertEqual(path.read_text(), "mine\n")


class ResumeTest(_TrainedRunTestCase):
    def test_damaged_latest_checkpoint_falls_back_and_steps_are_logged_once(self):
        def truncate(data):
            return data[:100]

        def flip_bytes(data):  # same size, the checksum no longer matches
            return bytes(b ^ 0xFF if i % 97 == 50 else b for i, b in enumerate(data))

        for damage, reason in [(truncate, r"IndexError: Read less bytes than requested"),
                               (flip_bytes, r"Checksum does not match")]:
            with self.subTest(damage=damage.__name__):
                workdir = self.copy_run(damage.__name__)
                data = workdir / "checkpoints" / "ckpt-12.data-00000-of-00001"
                data.write_bytes(damage(data.read_bytes()))
                with self.assertLogs(level="WARNING") as logs:
                    results = train_lib.run(tiny_config(), workdir, verbose=0)
                self.assertRegex("\n".join(logs.output),
                                 rf"Checkpoint .*{damage.__name__}/checkpoints/ckpt-12 cannot "
                                 rf"be read \(.*{reason}")
                self.assertEqual(results["global_step"], 12)  # steps 11, 12 again from ckpt-10
                steps = [json.loads(line)["global_step"]
                         for line in (workdir / "steps.jsonl").read_text().splitlines()]
                self.assertEqual(steps, list(range(1, 13)))

    def test_every_checkpoint_damaged_is_an_error_naming_them_not_a_restart(self):
        workdir = self.copy_run("all_damaged")
        for data in (workdir / "checkpoints").glob("*.data-*"):
            data.write_bytes(data.read_bytes()[:100])
        before = snapshot(workdir)
        with self.assertRaisesRegex(checkpointing.CheckpointRestoreError,
                                    r"ckpt-12: IndexError: Read less bytes.*ckpt-10: .*ckpt-5: "):
            train_lib.run(tiny_config(), workdir, verbose=0)
        after = snapshot(workdir)
        self.assertEqual({k: after[k] for k in before}, before)
        self.assertFalse(any(name.startswith("checkpoints/") for name in set(after) - set(before)))

    def test_a_trained_run_without_checkpoints_is_refused_unless_restarted(self):
        # Issue 27, damage 1: retraining would have replaced model.keras, results.json and cut
        # steps.jsonl; history.json would have mixed two runs.
        for damage in ("removed", "a_file", "emptied"):
            with self.subTest(damage=damage):
                workdir = self.copy_run(f"no_checkpoints_{damage}")
                shutil.rmtree(workdir / "checkpoints")
                if damage == "a_file":
                    (workdir / "checkpoints").write_text("not a folder\n")
                elif damage == "emptied":
                    (workdir / "checkpoints").mkdir()
                before = snapshot(workdir)
                message = (r"checkpoints is not a folder" if damage == "a_file" else
                           r"holds a trained run \(history.json, model.keras, results.json\) "
                           r"but no checkpoint .*pass --restart")
                with self.assertRaisesRegex(run_setup.RunRefusedError, message):
                    train_lib.run(tiny_config(), workdir, verbose=0)
                self.assertEqual(snapshot(workdir), before)
        # --restart moves the previous run aside, whole, and trains again from scratch.
        workdir = self.copy_run("restarted")
        shutil.rmtree(workdir / "checkpoints")
        before = snapshot(workdir)
        done = run_script("trainers/train.py", [
            "--preset=tiny", "--dataset=synthetic", "--synthetic_train_tokens=4000",
            "--steps_per_epoch=12", "--epochs=1", "--checkpoint_every_steps=5",
            "--max_eval_tokens=300", "--verbose=0", f"--workdir={workdir}"])
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("--restart", done.stderr)
        self.assertEqual(snapshot(workdir), before)
        results = train_lib.run(tiny_config(), workdir, verbose=0, restart=True)
        self.assertEqual(results["global_step"], 12)
        previous = snapshot(workdir / "previous_run_1")
        for name in ("model.keras", "history.json", "results.json", "steps.jsonl"):
            self.assertEqual(previous[name], before[name], name)
        self.assertLen((workdir / "steps.jsonl").read_text().splitlines(), 12)
        self.assertLen(json.loads((workdir / "history.json").read_text()), 1)

    def test_damaged_run_logs_are_refused_before_training(self):
        # Issue 27: a cut history.json let a resume train a whole epoch, then failed with a
        # JSONDecodeError naming no file; a step with "global_step": "12" gave a TypeError.
        def cut_history(workdir):
            path = workdir / "history.json"
            path.write_text(path.read_text()[:40])

        def string_step(workdir):
            path = workdir / "steps.jsonl"
            lines = path.read_text().splitlines()
            lines[3] = lines[3].replace('"global_step": 4', '"global_step": "4"')
            path.write_text("\n".join(lines) + "\n")

        def emptied_history(workdir):  # the second sweep: the resumed history lacked epoch 0
            (workdir / "history.json").write_text("[]\n")

        def cut_initial_pointer(workdir):  # read at the run's end: a traceback after an epoch
            path = workdir / "initial_pointer.npz"
            path.write_bytes(path.read_bytes()[:100])

        def tensorboard_a_file(workdir):  # a FailedPreconditionError traceback
            shutil.rmtree(workdir / "tensorboard")
            (workdir / "tensorboard").write_text("mine\n")

        def history_a_folder(workdir):
            (workdir / "history.json").unlink()
            (workdir / "history.json").mkdir()

        for damage, message in ((cut_history, r"history.json is not the run's epoch history "
                                              r"\(JSONDecodeError"),
                                (string_step, r"steps.jsonl: line 4 is not a training step's "
                                              r"record"),
                                (emptied_history, r"history.json lacks the record of epoch\(s\) "
                                                  r"\[0\], which .*ckpt-12 has finished"),
                                (cut_initial_pointer, r"initial_pointer.npz is not the pointer's "
                                                      r"initial weights \(BadZipFile"),
                                (tensorboard_a_file, r"tensorboard is not a folder: expected the "
                                                     r"run's tensorboard folder. Move it away\.$"),
                                (history_a_folder, r"history.json is not a file")):
            with self.subTest(damage=damage.__name__):
                workdir = self.copy_run(damage.__name__)
                damage(workdir)
                before = snapshot(workdir)
                with self.assertRaisesRegex(run_setup.RunRefusedError, message):
                    train_lib.run(tiny_config(max_epochs=2), workdir, verbose=0)
                self.assertEqual(snapshot(workdir), before)

    def test_a_refused_start_removes_only_what_it_created(self):
        # Issue 27, damage 2: entries a user adds while a start runs are theirs.
        workdir = Path(self.get_temp_dir()) / "user_files_meanwhile"
        original = run_setup.prepare_workdir

        def user_writes_then_refused(config, path, strategy, restart=False):
            original(config, path, strategy, restart=restart)  # writes synthetic_data/
            (Path(path) / "notes.txt").write_text("mine\n")
            (Path(path) / "evaluation_mine").mkdir()
            (Path(path) / "evaluation_mine" / "report.json").write_text("{}\n")
            raise run_setup.RunRefusedError("refused after the user wrote")

        from unittest import mock
        with mock.patch.object(run_setup, "prepare_workdir", user_writes_then_refused):
            with self.assertRaisesRegex(run_setup.RunRefusedError, "refused after"):
                train_lib.run(tiny_config(), workdir, verbose=0)
        self.assertEqual((workdir / "notes.txt").read_text(), "mine\n")
        self.assertEqual((workdir / "evaluation_mine" / "report.json").read_text(), "{}\n")
        self.assertFalse((workdir / "synthetic_data").exists())  # the start's own is removed

    def test_an_unknown_top_level_config_field_is_refused_not_dropped(self):
        # Issue 27, damage 3: one rule at the top level and inside a section.
        for where in ("top", "section"):
            with self.subTest(where=where):
                workdir = self.copy_run(f"config_field_{where}")
                config = json.loads((workdir / "config.json").read_text())
                if where == "top":
                    config["notes"] = "my run"
                else:
                    config["train"]["notes"] = "my run"
                (workdir / "config.json").write_text(json.dumps(config))
                before = snapshot(workdir)
                with self.assertRaisesRegex(run_setup.RunRefusedError,
                                            r"config.json is not a training run's config .*notes"):
                    train_lib.run(tiny_config(), workdir, verbose=0)
                self.assertEqual(snapshot(workdir), before)

    def test_steps_after_the_restored_step_are_dropped(self):
        workdir = Path(self.get_temp_dir()) / "steps_only"
        workdir.mkdir(exist_ok=True)
        lines = [json.dumps({"epoch": 0, "step": i, "global_step": i + 1, "loss": 1.0})
                 for i in range(8)]
        (workdir / "steps.jsonl").write_text("\n".join(lines) + '\n{"epoch": 0, "ste')
        reporter = reporting.Reporter(workdir, verbose=0)
        reporter.drop_steps_after(5)
        reporter.close()
        kept = (workdir / "steps.jsonl").read_text()
        self.assertEqual(kept, "".join(line + "\n" for line in lines[:5]))


class EvaluateSplitTest(_TrainedRunTestCase):
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


class VocabularyTest(_TrainedRunTestCase):
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


class ExportTest(_TrainedRunTestCase):
    def test_version_folders_are_readable_by_other_users(self):
        export_dir = testing.shared_export()[2]
        self.assertEqual(stat.S_IMODE(os.stat(export_dir).st_mode), 0o755)

    def test_version_zero_and_a_permuted_vocabulary_are_refused(self):
        run = self.copy_run("export_run")
        permuted = Path(self.get_temp_dir()) / "permuted_vocab.txt"
        tokens = (run / "vocab.txt").read_text().splitlines()
        tokens[5], tokens[6] = tokens[6], tokens[5]
        permuted.write_text("".join(t + "\n" for t in tokens))
        before = snapshot(run)
        base = Path(self.get_temp_dir()) / "exports"
        for argv, message in [
            ([f"--workdir={run}", "--model_version=0"],
             r"flag --model_version=0: must be an integer in \[1, 2\*\*63\)"),
            # Issue 27 (silent 11): accepted before, though TF Serving's versions are int64.
            ([f"--workdir={run}", "--model_version=99999999999999999999"],
             r"flag --model_version=99999999999999999999: must be an integer in \[1, 2\*\*63\)"),
            ([f"--workdir={run}", "--max_request_tokens=1"],
             r"flag --max_request_tokens=1: 1 is not integer >= 2"),
            ([f"--workdir={run}", f"--vocab={permuted}"],
             r"psmm-export: Vocabulary .*permuted_vocab.txt is not the one the model of "
             r".*export_run was trained with"),
            ([f"--keras_model={run / 'model.keras'}", f"--vocab={permuted}"],
             r"Vocabulary .*permuted_vocab.txt is not the one"),
            ([f"--checkpoint={run / 'checkpoints'}", f"--config={run / 'config.json'}",
              f"--vocab={permuted}"], r"Vocabulary .*permuted_vocab.txt is not the one"),
        ]:
            with self.subTest(argv=argv):
                code, _, stderr = testing.run_export_main([*argv, f"--export_base={base}"])
                self.assertNotEqual(code, 0)
                self.assertRegex(stderr, message)
                self.assertFalse(base.exists())
        self.assertEqual(snapshot(run), before)

    def test_a_model_keras_of_another_run_is_refused(self):
        # Issue 27 (silent 6): another run's model.keras (hidden 32) in a hidden-16 run was
        # exported with assets.extra/config.json saying 16.
        from psmm_tf.models import build_model

        run = self.copy_run("swapped_model")
        config = run_files.load_config(run)
        other = build_model(configs.dataclasses.replace(config.model, hidden_dim=32))
        other.save(run / "model.keras")
        before = snapshot(run)
        base = Path(self.get_temp_dir()) / "swapped_exports"
        message = (r"model.keras is not the model its run's config describes \(hidden_dim: "
                   r"config 16, model 32\)")
        code, _, stderr = testing.run_export_main([f"--workdir={run}", "--model_source=best",
                                                   f"--export_base={base}"])
        self.assertEqual(code, 1)
        self.assertRegex(stderr, message)
        code, _, stderr = testing.run_export_main([
            f"--keras_model={run / 'model.keras'}", f"--config={run / 'config.json'}",
            f"--vocab={run / 'vocab.txt'}", f"--export_base={base}"])
        self.assertEqual(code, 1)
        self.assertRegex(stderr, message)
        done = run_script("trainers/evaluate.py", [f"--workdir={run}", "--model_source=best",
                                                   "--max_tokens=50"])
        self.assertEqual(done.returncode, 1, done.stderr[-2000:])
        self.assertRegex(done.stderr, message)
        self.assertFalse(base.exists())
        self.assertEqual(snapshot(run), before)

    def test_another_runs_vocabulary_files_are_refused_by_the_model_itself(self):
        # Issue 27 (silent 5): vocab.txt and vocab.sha256 of another run agree with each other;
        # psmm-evaluate then reported 100.08 where the true perplexity was 33.16.
        # Also one of another size (tracebacks before: an index out of [0, V), a broadcast).
        def swapped(tokens):
            return tokens[:5] + [tokens[6], tokens[5]] + tokens[7:]

        for name, damage in (("swapped", swapped), ("shorter", lambda tokens: tokens[:40])):
            run = self.copy_run(f"{name}_vocabulary")
            tokens = damage((run / "vocab.txt").read_text().splitlines())
            (run / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
            run_files.write_vocabulary_hash(run)
            before = snapshot(run)
            base = Path(self.get_temp_dir()) / f"{name}_vocabulary_exports"
            for source, message in (("best", r"model.keras was trained with another "
                                              r"vocabulary \(its own, saved inside it"),
                                    ("latest", r"Checkpoint .*ckpt-12 was trained with another "
                                               r"vocabulary")):
                with self.subTest(vocabulary=name, source=source):
                    code, _, stderr = testing.run_export_main([
                        f"--workdir={run}", f"--model_source={source}", f"--export_base={base}"])
                    self.assertEqual(code, 1)
                    self.assertRegex(stderr, message)
                    done = run_script("trainers/evaluate.py", [
                        f"--workdir={run}", f"--model_source={source}", "--max_tokens=50"])
                    self.assertEqual(done.returncode, 1, done.stderr[-2000:])
                    self.assertRegex(done.stderr, message)
            self.assertFalse(base.exists())
            self.assertEqual(snapshot(run), before)

    def test_export_of_an_empty_workdir_names_the_missing_file(self):
        workdir = Path(self.get_temp_dir()) / "empty_workdir"
        workdir.mkdir(exist_ok=True)
        base = Path(self.get_temp_dir()) / "exports_of_empty"
        code, _, stderr = testing.run_export_main([f"--workdir={workdir}",
                                                   f"--export_base={base}"])
        self.assertEqual(code, 1)
        self.assertRegex(stderr, r"psmm-export: --workdir=.*empty_workdir: no "
                                 r".*empty_workdir/config.json; expected a training run's")
        self.assertFalse(base.exists())

    def test_score_refuses_a_version_that_does_not_exist(self):
        export_dir = testing.shared_export()[2]
        text = Path(self.get_temp_dir()) / "text.txt"
        text.write_text("the cat sat\n")
        base = os.path.dirname(export_dir)
        for argv, message in [
            ([f"--model={base}", "--model_version=7"],
             r"psmm-score: --model=.*: No version 7 in .*; it holds versions 1\.\n"),
            ([f"--model={export_dir}", "--model_version=7"],
             r"Version 7 was asked for, but .* is the export of version '1'"),
            ([f"--model={base}/missing"], r"No export folder .*missing"),
        ]:
            with self.subTest(argv=argv):
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    code = score.main([*argv, f"--input={text}"], out=io.StringIO())
                self.assertEqual(code, 2)
                self.assertRegex(err.getvalue(), message)
        out = io.StringIO()
        self.assertEqual(score.main([f"--model={base}", "--model_version=1", f"--input={text}"],
                                    out=out), 0)
        self.assertIn("# total: perplexity", out.getvalue())


class _FixedReply(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = self.server.body
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _Trickle(http.server.BaseHTTPRequestHandler):
    """Answers one byte every 0.2 s: every read returns within any socket timeout."""

    def do_POST(self):  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"outputs": {}}' * 40
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for i in range(len(body)):
            if self.server.stop.is_set():
                return
            self.wfile.write(body[i:i + 1])
            self.wfile.flush()
            self.server.stop.wait(0.2)

    def log_message(self, *args):
        pass


class RestDeadlineTest(tf.test.TestCase):
    def test_timeout_is_a_deadline_for_the_whole_answer(self):
        # Issue 27 (silent 8): --timeout=2 against a 1 byte/s server ran 41.8 s.
        text = Path(self.get_temp_dir()) / "text.txt"
        text.write_text("the cat\n")
        server = http.server.HTTPServer(("127.0.0.1", 0), _Trickle)
        server.stop = threading.Event()
        thread = threading.Thread(target=server.handle_request, daemon=True)
        thread.start()
        err = io.StringIO()
        start = time.monotonic()
        try:
            with contextlib.redirect_stderr(err):
                code = score.main([f"--rest=http://127.0.0.1:{server.server_address[1]}",
                                   f"--input={text}", "--timeout=1"], out=io.StringIO())
        finally:
            server.stop.set()
            thread.join(10)
            server.server_close()
        self.assertLess(time.monotonic() - start, 10)
        self.assertEqual(code, 1)
        self.assertRegex(err.getvalue(), r"No complete answer from http://127.0.0.1:\d+/v1/"
                                         r"models/psmm:predict within the timeout of 1 s "
                                         r"\(--timeout\)")


class RestAddressTest(tf.test.TestCase):
    def test_unreachable_or_foreign_servers_are_errors_naming_the_address(self):
        with socket.socket() as sock:  # a port nothing listens on
            sock.bind(("127.0.0.1", 0))
            closed = sock.getsockname()[1]
        text = Path(self.get_temp_dir()) / "text.txt"
        text.write_text("the cat sat\n")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = score.main([f"--rest=http://127.0.0.1:{closed}", f"--input={text}",
                               "--timeout=5"], out=io.StringIO())
        self.assertEqual(code, 1)
        self.assertRegex(err.getvalue(), rf"psmm-score: No answer from http://127.0.0.1:"
                                         rf"{closed}/v1/models/psmm:predict: .*refused")
        for body, message in [(b"<html>hello</html>", r"answered something that is not JSON"),
                              (b'{"predictions": [1]}', r"Expected named outputs from"),
                              (b"[1, 2]", r"Expected named outputs from")]:
            with self.subTest(body=body):
                server = http.server.HTTPServer(("127.0.0.1", 0), _FixedReply)
                server.body = body
                thread = threading.Thread(target=server.handle_request, daemon=True)
                thread.start()
                url = f"http://127.0.0.1:{server.server_address[1]}"
                try:
                    with self.assertRaises(ServingError) as caught:
                        RestClient(url, "psmm", timeout=5).predict(
                            "initial_state", {"stream_ids": np.zeros([1], np.int32)})
                    self.assertRegex(str(caught.exception), message)
                    self.assertIn(f"{url}/v1/models/psmm:predict", str(caught.exception))
                finally:
                    thread.join(10)
                    server.server_close()


class ServingInputsTest(tf.test.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.client = LocalClient(testing.shared_export()[2])

    def test_nan_or_inf_in_float_state_is_refused_naming_the_input(self):
        state = self.client.predict("initial_state", {"stream_ids": np.zeros([1], np.int32)})
        texts = np.array(["the cat sat\n"], object)
        ids = {"token_ids": np.array([[2, 3, 4]], np.int32), "lengths": np.array([3], np.int32)}
        for name, value in [("lstm_state", np.nan), ("memory_hidden", np.inf),
                            ("lstm_state", -np.inf)]:
            bad = {**state, name: state[name].copy()}
            bad[name].reshape(-1)[0] = value
            for signature, inputs in [("score_text_stream", {"texts": texts}),
                                      ("score_stream", ids)]:
                with self.subTest(name=name, value=value, signature=signature):
                    with self.assertRaisesRegex(ServingError,
                                                rf"`{name}` holds NaN or infinite values"):
                        self.client.predict(signature, {**inputs, **bad})
        outputs = self.client.predict("score_text_stream", {"texts": texts, **state})
        self.assertTrue(np.isfinite(outputs["perplexity"]).all())

    def test_requests_longer_than_the_limit_are_refused_naming_the_input(self):
        words = DEFAULT_MAX_TOKENS  # plus the <eos> of the line: one token too many
        texts = np.array(["the " * words + "\n"], object)
        for signature in ("score_text", "serving_default", "predict_next"):
            with self.subTest(signature=signature):
                inputs = {"texts": texts}
                if signature == "predict_next":
                    inputs = {"texts": np.array(["the " * (words + 1)], object),
                              "k": np.array(3, np.int32)}
                with self.assertRaisesRegex(ServingError, rf"`texts` is too long: a request "
                                                          rf"holds at most {DEFAULT_MAX_TOKENS}"):
                    self.client.predict(signature, inputs)
        ids = np.full([2, DEFAULT_MAX_TOKENS // 2 + 1], 2, np.int32)
        with self.assertRaisesRegex(ServingError, r"`token_ids` is too long"):
            self.client.predict("score", {"token_ids": ids,
                                          "lengths": np.array([3, 3], np.int32)})

    def test_nan_in_the_cache_state_is_refused_naming_it(self):
        model, vocabulary_file, _ = testing.shared_export()
        module = ServingModule(NeuralCache(model, window=4, theta=0.3, lam=0.1), vocabulary_file)
        state = module.initial_state({"stream_ids": tf.constant([0])})
        texts = tf.constant(["the cat sat"])
        self.assertIn("cache_hidden", state)
        ok = module.score_text_stream({"texts": texts, **state})
        self.assertTrue(np.isfinite(ok["perplexity"].numpy()).all())
        bad = tf.tensor_scatter_nd_update(state["cache_hidden"], [[0, 1, 2]], [np.nan])
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"`cache_hidden` holds NaN or infinite values"):
            module.score_text_stream({"texts": texts, **state, "cache_hidden": bad})

    def test_the_limit_is_the_modules(self):
        model, vocabulary_file, _ = testing.shared_export()
        module = ServingModule(model, vocabulary_file, max_tokens=10)
        ok = module.score_text({"texts": tf.constant(["the cat sat on the mat"])})
        self.assertEqual(int(ok["num_tokens"][0]), 7)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"`texts` is too long: a request holds at most 10 tokens"):
            module.score_text({"texts": tf.constant(["the cat sat on the mat", "a b c d e"])})
        with self.assertRaisesRegex(ValueError, r"max_tokens must be >= 1, got 0"):
            ServingModule(model, vocabulary_file, max_tokens=0)



# The sweep (docs/hostile_inputs.md): the cases below, with those above, one test per surface.

def _drop_file_permission_override():
    """preexec_fn: the child loses CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (root ignores a
    folder's mode otherwise), so a read-only folder is read-only to it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _truncate(path, size=100):
    path = Path(path)
    path.write_bytes(path.read_bytes()[:size])


class FlagSweepTest(tf.test.TestCase):
    def test_bad_flag_values_and_combinations_are_refused_writing_nothing(self):
        root = Path(self.get_temp_dir())
        corpus = write_text_corpus(root / "flag_corpus")
        before = snapshot(corpus)
        workdir = root / "flag_run"
        for args, message in [
            (["--batch_size=0"], r"flag --batch_size=0: must be an integer >= 1"),
            (["--batch_size=abc"], r"flag --batch_size=abc: invalid literal"),
            (["--dropout=1.5"], r"flag --dropout=1.5: must be a probability in \[0, 1\)"),
            (["--learning_rate=nan"], r"flag --learning_rate=nan: must be a finite number > 0"),
            (["--clip_norm=inf"], r"flag --clip_norm=inf: must be a finite number > 0"),
            (["--pointer_clip_norm=inf"], r"flag --pointer_clip_norm=inf: must be a finite"),
            (["--seed=-1"], r"flag --seed=-1: must be an integer in \[0, 2\*\*32\)"),
            (["--preset=huge"], r"flag --preset=huge: value should be one of"),
            (["--window_size=4", "--context_length=9", "--pointer_memory=recompute"],
             r"--context_length=9 must be < --window_size=4"),
            (["--gate_embedding_dim=5"], r"--gate_embedding_dim is only used with "
                                         r"--input_output_gate_on"),
            (["--max_vocab_size=1"], r"--max_vocab_size cannot be used with --dataset=synthetic"),
            (["--dataset=text", f"--data_dir={corpus}", "--synthetic_train_tokens=100"],
             r"--synthetic_train_tokens is only used with --dataset=synthetic"),
            (["--dataset=ptb"], r"--data_dir is required for --dataset=ptb"),
            (["--strategy=multi_worker"], r"--strategy=multi_worker needs the cluster in "
                                          r"TF_CONFIG"),
            (["stray_argument"], r"Unexpected arguments: stray_argument"),
            ([f"--input_output_gate_on={root / 'no_run'}"],
             r"--input_output_gate_on=.*no_run: .*no_run has no config.json"),
            ([f"--input_output_gate_on={corpus}", "--model=lstm"],
             r"--model cannot be combined with it"),
        ]:
            with self.subTest(args=args):
                done = run_script("trainers/train.py", [f"--workdir={workdir}", *args],
                                  env={"TF_CONFIG": ""})
                self.assertEqual(done.returncode, 1)
                self.assertRegex(done.stderr, message)
                self.assertNotIn("Traceback", done.stderr)
                self.assertFalse(workdir.exists())
        self.assertEqual(snapshot(corpus), before)


class CorpusSweepTest(_TrainedRunTestCase):
    def test_unreadable_corpus_files_are_refused_naming_them(self):
        root = Path(self.get_temp_dir())
        cases = {
            "not_gzip": ("train.txt.gz", b"plain text, not gzip\n" * 20,
                         r"train.txt.gz: not a readable gzip file after line 0"),
            "cut_gzip": ("train.txt.gz", gzip.compress(os.urandom(4000).hex().encode() + b"\n")
                         [:500], r"train.txt.gz: not a readable gzip file after line 0"),
            "latin1": ("train.txt", "the caf\xe9 sat\n".encode("latin-1") * 50,
                       r"train.txt: line 1 is not valid UTF-8 .*expected a UTF-8 text file"),
        }
        for name, (file_name, data, message) in cases.items():
            with self.subTest(case=name):
                folder = root / name
                folder.mkdir(exist_ok=True)
                (folder / file_name).write_bytes(data)
                (folder / "valid.txt").write_text("the cat sat\n" * 5)
                before = snapshot(folder)
                workdir = root / f"run_{name}"
                config = tiny_config().replace(data={"dataset": "text",
                                                     "data_dir": str(folder)})
                with self.assertRaisesRegex(run_setup.RunRefusedError, message):
                    train_lib.run(config, workdir, verbose=0)
                self.assertFalse(workdir.exists())
                self.assertEqual(snapshot(folder), before)

    def test_a_missing_or_empty_validation_file_is_refused_naming_it(self):
        root = Path(self.get_temp_dir())
        for name, valid, message in [
            ("no_valid", None, r"validation split \('valid' in .*no_valid\) has no file"),
            ("empty_valid", "", r"Corpus file .*empty_valid/valid.txt is empty"),
        ]:
            with self.subTest(case=name):
                folder = root / name
                folder.mkdir(exist_ok=True)
                (folder / "train.txt").write_text("the cat sat on the mat .\n" * 400)
                if valid is not None:
                    (folder / "valid.txt").write_text(valid)
                before = snapshot(folder)
                workdir = root / f"run_{name}"
                config = tiny_config().replace(data={"dataset": "text",
                                                     "data_dir": str(folder)})
                with self.assertRaisesRegex(run_setup.RunRefusedError, message):
                    train_lib.run(config, workdir, verbose=0)
                self.assertFalse(workdir.exists())
                self.assertEqual(snapshot(folder), before)

    def test_a_huge_single_line_is_read_as_one_stream(self):
        folder = Path(self.get_temp_dir()) / "one_huge_line"
        folder.mkdir(exist_ok=True)
        words = ["the", "cat", "sat", "on", "a", "mat"]
        (folder / "train.txt").write_text(" ".join(words[i % 6] for i in range(200_000)))
        (folder / "valid.txt").write_text("the cat sat\n")
        corpus = corpus_setup.load_corpus(configs.DataConfig(dataset="text",
                                                             data_dir=str(folder)))
        self.assertLen(corpus.ids["train"], 200_001)  # the words and one <eos>
        self.assertEqual(sorted(corpus.vocabulary.tokens), ["<eos>", "<unk>", *sorted(words)])

    def test_a_refused_start_leaves_no_generated_corpus_behind(self):
        workdir = Path(self.get_temp_dir()) / "refused_with_user_file"
        workdir.mkdir(exist_ok=True)
        (workdir / "notes.txt").write_text("mine\n")
        with self.assertRaisesRegex(run_setup.RunRefusedError, r"too few for batch_size=1000"):
            train_lib.run(tiny_config(batch_size=1000), workdir, verbose=0)
        self.assertEqual(snapshot(workdir), {"notes.txt": b"mine\n"})  # no synthetic_data/
        fresh = Path(self.get_temp_dir()) / "refused_fresh"
        with self.assertRaises(run_setup.RunRefusedError):
            train_lib.run(tiny_config(batch_size=1000), fresh, verbose=0)
        self.assertFalse(fresh.exists())


class WorkdirSweepTest(_TrainedRunTestCase):
    def test_a_run_of_another_kind_or_preset_or_a_damaged_config_is_refused(self):
        workdir = self.copy_run("kind_preset")
        before = snapshot(workdir)
        small = configs.get_preset("small").replace(
            data={"synthetic_train_tokens": 4000},
            train={"steps_per_epoch": 12, "max_epochs": 1, "checkpoint_every_steps": 5,
                   "max_eval_tokens": 300})
        for config, message in [
            (tiny_config().replace(model={"kind": "lstm"}), r"model.kind: 'psmm' -> 'lstm'"),
            (tiny_config().replace(model={"kind": "pointer_softmax"}),
             r"model.kind: 'psmm' -> 'pointer_softmax'"),
            (small, r"holds a run with another config \(.*model.hidden_dim: 16 -> 200"),
        ]:
            with self.subTest(message=message):
                with self.assertRaisesRegex(run_setup.RunRefusedError, message):
                    train_lib.run(config, workdir, verbose=0)
                self.assertEqual(snapshot(workdir), before)
        (workdir / "config.json").write_text('{"model": ')
        before = snapshot(workdir)
        with self.assertRaisesRegex(run_setup.RunRefusedError,
                                    r"kind_preset/config.json is not a training run's config "
                                    r"\(JSONDecodeError"):
            train_lib.run(tiny_config(), workdir, verbose=0)
        with self.assertRaisesRegex(trained_run.RunLoadError,
                                    r"kind_preset/config.json is not a training run's config"):
            trained_run.load_trained_run(workdir)
        code, _, stderr = testing.run_export_main([f"--workdir={workdir}",
                                                   f"--export_base={workdir}_exports"])
        self.assertEqual(code, 1)
        self.assertRegex(stderr, r"psmm-export: Config .*kind_preset/config.json is not")
        self.assertEqual(snapshot(workdir), before)

    def test_read_only_workdirs_and_folders_are_refused_naming_them(self):
        if os.geteuid() != 0:
            self.skipTest("the cases drop root's permission override; run as root")
        root = Path(self.get_temp_dir()) / "read_only"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        shutil.copytree(self.base, root / "run")
        for path in [root, *root.rglob("*")]:
            path.chmod(0o555 if path.is_dir() else 0o444)
        before = snapshot(root)
        code = (
            "import sys\n"
            "from psmm_tf.evaluation import report, trained_run\n"
            "from psmm_tf.training import run_setup, train_lib\n"
            "from train_testlib import tiny_config\n"
            "from psmm_tf.export import testing\n"
            f"root = {str(root)!r}\n"
            "for workdir in (root + '/run', root + '/new_run'):\n"
            "    try:\n"
            "        train_lib.run(tiny_config(), workdir, verbose=0)\n"
            "    except run_setup.RunRefusedError as err:\n"
            "        print('TRAIN', err)\n"
            "try:\n"
            "    report.evaluation_report(root + '/run', root + '/run/report', 'valid',"
            " max_tokens=50)\n"
            "except trained_run.RunLoadError as err:\n"
            "    print('EVALUATE', err)\n"
            "code, _, stderr = testing.run_export_main(['--workdir=' + root + '/run',"
            " '--export_base=' + root + '/exports'])\n"
            "print('EXPORT', code, stderr.strip().splitlines()[-1])\n"
        )
        env = child_env(paths=[REPO_ROOT / "tests"])
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, preexec_fn=_drop_file_permission_override, timeout=240)
        try:
            self.assertEqual(done.returncode, 0, done.stderr[-3000:])
            self.assertRegex(done.stdout, r"TRAIN Cannot write the lock file .*read_only/run/"
                                          r"\.lock \(is the workdir writable\?\): Permission")
            self.assertRegex(done.stdout, r"TRAIN Cannot create the workdir .*read_only/new_run:"
                                          r" Permission denied")
            self.assertRegex(done.stdout, r"EVALUATE output_dir=.*read_only/run/report: cannot "
                                          r"create it \(Permission denied\)")
            self.assertRegex(done.stdout, r"EXPORT 1 psmm-export: --export_base=.*read_only/"
                                          r"exports: Permission denied")
            self.assertEqual(snapshot(root), before)
        finally:
            for path in [root, *root.rglob("*")]:
                path.chmod(0o755 if path.is_dir() else 0o644)

    def test_gate_run_whose_base_run_lacks_its_vocabulary_is_refused(self):
        from psmm_tf.training import gate_training

        base = self.copy_run("gate_base")
        config = gate_training.input_output_gate_config(base, embedding_dim=4,
                                                        steps_per_epoch=2)
        (base / "vocab.txt").unlink()
        before = snapshot(base)
        workdir = Path(self.get_temp_dir()) / "gate_run"
        with self.assertRaisesRegex(run_setup.RunRefusedError,
                                    r"No .*gate_base/vocab.txt: an input-to-output gate run "
                                    r"reads the vocabulary of the run"):
            train_lib.run(config, workdir, verbose=0)
        self.assertFalse(workdir.exists())
        done = run_script("trainers/train.py", [f"--workdir={workdir}",
                                                f"--input_output_gate_on={base}"])
        self.assertEqual(done.returncode, 1)
        self.assertRegex(done.stderr, r"--input_output_gate_on=.*gate_base: .*gate_base has no "
                                      r"vocab.txt")
        self.assertNotIn("Traceback", done.stderr)
        self.assertFalse(workdir.exists())
        self.assertEqual(snapshot(base), before)


class EvaluateSweepTest(_TrainedRunTestCase):
    def test_damaged_models_and_bad_report_options_are_errors_naming_them(self):
        root = Path(self.get_temp_dir())
        cut_model = self.copy_run("cut_model")
        _truncate(cut_model / "model.keras", 3000)
        no_model = self.copy_run("all_checkpoints_cut")
        (no_model / "model.keras").unlink()
        for data in (no_model / "checkpoints").glob("*.data-*"):
            _truncate(data)
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
        ]:
            with self.subTest(run=run.name, options=options):
                before = snapshot(run)
                output_dir = options.pop("output_dir", run / "report")
                with self.assertRaisesRegex(trained_run.RunLoadError, message):
                    report.evaluation_report(run, output_dir, "valid", max_tokens=50,
                                                        **options)
                self.assertEqual(snapshot(run), before)
        self.assertEqual(a_file.read_text(), "mine\n")
        done = run_script("trainers/evaluate.py", [f"--workdir={cut_model}", "--max_tokens=50"])
        self.assertEqual(done.returncode, 1)
        self.assertRegex(done.stderr, r"FATAL .*cut_model/model.keras cannot be read")
        self.assertNotIn("Traceback", done.stderr)


class ExportSweepTest(_TrainedRunTestCase):
    def test_damaged_checkpoints_fall_back_or_name_the_files(self):
        from psmm_tf.export import export_lib

        run = self.copy_run("export_damaged")
        _truncate(run / "checkpoints" / "ckpt-12.data-00000-of-00001")

        def load(checkpoint):
            return export_lib.load_model(checkpoint=str(checkpoint),
                                         config=str(run / "config.json"),
                                         vocab=str(run / "vocab.txt"))[3]

        with self.assertLogs(level="WARNING") as logs:
            source = load(run / "checkpoints")
        self.assertEndsWith(source, str(run / "checkpoints" / "ckpt-10"))
        self.assertRegex("\n".join(logs.output), r"ckpt-12 cannot be read \(IndexError")
        with self.assertRaisesRegex(ValueError, r"No checkpoint of --checkpoint=.*ckpt-12 can be "
                                                r"read: .*ckpt-12: IndexError"):
            load(run / "checkpoints" / "ckpt-12")
        with self.assertRaisesRegex(FileNotFoundError, r"--checkpoint=.*ckpt-99: no .*ckpt-99"
                                                       r"\.index; expected a checkpoint prefix"):
            load(run / "checkpoints" / "ckpt-99")

    def test_bad_sources_and_export_bases_are_messages_writing_nothing(self):
        root = Path(self.get_temp_dir())
        run = self.copy_run("export_sources")
        lstm_config = root / "lstm_config.json"
        lstm_config.write_text(json.dumps({**json.loads((run / "config.json").read_text()),
                                           "model": {**json.loads((run / "config.json")
                                                                  .read_text())["model"],
                                                     "kind": "lstm"}}))
        cut_keras = root / "cut" / "model.keras"
        cut_keras.parent.mkdir(exist_ok=True)
        cut_keras.write_bytes((run / "model.keras").read_bytes()[:3000])
        a_file = root / "base_is_a_file"
        a_file.write_text("mine\n")
        taken = root / "taken_base"
        (taken / "1").mkdir(parents=True, exist_ok=True)
        (taken / "1" / "saved_model.pb").write_bytes(b"someone's export")
        checkpoint = ["--checkpoint=" + str(run / "checkpoints"), f"--vocab={run / 'vocab.txt'}"]
        loop = root / "loop"
        loop.symlink_to(loop)  # a symbolic link to itself
        no_checkpoints = self.copy_run("export_checkpoints_a_file")
        shutil.rmtree(no_checkpoints / "checkpoints")
        (no_checkpoints / "checkpoints").write_text("not a folder\n")
        for argv, base, message in [
            ([f"--workdir={run}"], loop,
             r"--export_base=.*loop: a symbolic link that leads nowhere \(a loop, or its target "
             r"is missing\)"),
            ([f"--workdir={no_checkpoints}", "--model_source=latest"], root / "b3",
             r"export_checkpoints_a_file/checkpoints is not a folder: --model_source=latest "
             r"exports the newest checkpoint"),
            ([*checkpoint, f"--config={lstm_config}"], root / "b1",
             r"--config does not describe the model of the checkpoint's run .*export_sources/"
             r"config.json \(model.kind: 'psmm' in the run, 'lstm' in --config\)"),
            ([f"--keras_model={cut_keras}", f"--vocab={run / 'vocab.txt'}"], root / "b2",
             r"cut/model.keras cannot be read as a .keras model"),
            ([f"--workdir={run}"], a_file, r"--export_base=.*base_is_a_file is a file"),
            ([f"--workdir={run}"], a_file / "sub", r"--export_base=.*base_is_a_file/sub: Not a "
                                                   r"directory"),
            ([f"--workdir={run}", "--model_version=1"], taken,
             r"taken_base/1 exists; versions are never overwritten"),
        ]:
            with self.subTest(argv=argv, base=base):
                before = {path: snapshot(path) for path in (run, taken)}
                code, _, stderr = testing.run_export_main([*argv, f"--export_base={base}"])
                self.assertEqual(code, 1)
                self.assertRegex(stderr, message)
                self.assertNotIn("Traceback", stderr)
                self.assertEqual({path: snapshot(path) for path in (run, taken)}, before)
                self.assertFalse(base.exists() and base.is_dir() and base != taken)
        self.assertEqual(a_file.read_text(), "mine\n")
        self.assertEqual(sorted(p.name for p in taken.iterdir()), ["1"])


class ScoreSweepTest(tf.test.TestCase):
    def score(self, argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                code = score.main(argv, out=io.StringIO())
            except SystemExit as exit_:  # flag errors
                code = exit_.code
        return code, err.getvalue()

    def test_bad_addresses_options_and_inputs_are_named(self):
        root = Path(self.get_temp_dir())
        text = root / "text.txt"
        text.write_text("the cat sat\n")
        latin1 = root / "latin1.txt"
        latin1.write_bytes("the caf\xe9\n".encode("latin-1"))
        empty = root / "empty.txt"
        empty.write_bytes(b"")
        huge = root / "huge_line.txt"
        huge.write_text("the " * DEFAULT_MAX_TOKENS + "\n")
        export_dir = testing.shared_export()[2]
        # Second sweep: /dev/zero as --input was read without end (no newline ever comes), and a
        # cut saved_model.pb was a traceback.
        endless = root / "endless_line.txt"
        with open(endless, "wb") as f:
            f.write(b"the cat\n" + b"\0" * (score.score_lib.MAX_LINE_BYTES + 1))
        cut_export = root / "cut_export"
        shutil.copytree(Path(export_dir).parent, cut_export)
        _truncate(cut_export / "1" / "saved_model.pb", 5000)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            closed = sock.getsockname()[1]
        for argv, status, message in [
            (["--rest=localhost:8501"], 2, r"--rest=localhost:8501: 'localhost:8501' is not an "
                                           r"http\(s\) URL with a host"),
            (["--rest=http://[::1"], 2, r"--rest=http://\[::1: .* is not a URL \(Invalid IPv6"),
            (["--rest=http://127.0.0.1:99999"], 2, r"is not a URL \(Port out of range"),
            ([f"--rest=http://127.0.0.1:{closed}", "--timeout=0"], 2,
             r"flag --timeout=0.0: must be a finite number of seconds > 0"),
            ([f"--model={export_dir}", "--model_version=-3"], 2,
             r"flag --model_version=-3: must be an integer >= 1"),
            ([f"--model={export_dir}", "--lines_per_request=0"], 2,
             r"--lines_per_request must be >= 1"),
            ([f"--model={export_dir}", "--model_name=x", f"--grpc=127.0.0.1:{closed}"], 2,
             r"Exactly one of \(model, rest, grpc\)"),
            ([f"--model={root}"], 2, r"--model=.*: No saved_model.pb and no version folder"),
            ([f"--model={export_dir}", f"--input={latin1}"], 2,
             r"cannot read .*latin1.txt: line 1 is not valid UTF-8 \(unexpected end of data at "
             r"byte 7\)"),
            ([f"--model={export_dir}", f"--input={endless}"], 2,
             r"cannot read .*endless_line.txt: line 2 is longer than 8,388,608 bytes"),
            ([f"--model={cut_export}"], 2,
             r"--model=.*cut_export: .*cut_export/1 cannot be loaded as a SavedModel \(damaged "
             r"or incomplete: Cannot parse file"),
            ([f"--model={export_dir}", f"--input={empty}"], 2, r"empty.txt holds no line"),
            ([f"--model={export_dir}", f"--input={root / 'missing.txt'}"], 2,
             r"cannot read .*missing.txt: \[Errno 2\]"),
            ([f"--model={export_dir}", f"--input={root}"], 2, r"cannot read .*Is a directory"),
            ([f"--grpc=127.0.0.1:{closed}", "--timeout=5"], 1,
             rf"UNAVAILABLE from 127.0.0.1:{closed} \(model 'psmm'\)"),
            ([f"--model={export_dir}", f"--input={huge}"], 1,
             rf"`texts` is too long: a request holds at most {DEFAULT_MAX_TOKENS} tokens"),
        ]:
            with self.subTest(argv=argv):
                if not any(a.startswith("--input") for a in argv):
                    argv = [*argv, f"--input={text}"]
                code, stderr = self.score(argv)
                self.assertEqual(code, status, stderr)
                self.assertRegex(stderr, message)

    def test_a_server_answering_html_is_named_by_psmm_score(self):
        text = Path(self.get_temp_dir()) / "text.txt"
        text.write_text("the cat\n")
        server = http.server.HTTPServer(("127.0.0.1", 0), _FixedReply)
        server.body = b"<html><body>It works!</body></html>"
        thread = threading.Thread(target=server.handle_request, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            code, stderr = self.score([f"--rest={url}", f"--input={text}", "--timeout=5"])
        finally:
            thread.join(10)
            server.server_close()
        self.assertEqual(code, 1)
        self.assertRegex(stderr, rf"psmm-score: {url}/v1/models/psmm:predict answered "
                                 r"something that is not JSON \(not TF Serving\?\): b'<html>")


class ExportVocabularyTest(tf.test.TestCase):
    def test_an_edited_vocabulary_asset_changes_nothing_scored(self):
        # Second sweep: another run's vocab.txt copied over an export's assets/vocab.txt was
        # read by the lookup tables at load, and the export scored with it (exit 0).
        export_dir = Path(testing.shared_export()[2])
        edited = Path(self.get_temp_dir()) / "edited_export"
        shutil.copytree(export_dir.parent, edited)
        asset = edited / export_dir.name / "assets" / "vocab.txt"
        tokens = asset.read_text().splitlines()
        asset.write_text("\n".join(reversed(tokens[:7])) + "\n")
        texts = np.array(["the cat sat on the mat\n"], object)
        original = LocalClient(str(export_dir)).predict("score_text", {"texts": texts})
        swapped = LocalClient(str(edited)).predict("score_text", {"texts": texts})
        self.assertAllEqual(swapped["token_ids"], original["token_ids"])
        self.assertAllClose(swapped["log_probs"], original["log_probs"], rtol=0, atol=0)


class DiskFullTest(_TrainedRunTestCase):
    """A full disk, made real with a file-size limit (RLIMIT_FSIZE: writes past it fail with
    EFBIG, "File too large", as they fail with ENOSPC on a full disk)."""

    def run_limited(self, script, args, limit_bytes):
        import resource

        def limit():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of a kill
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

        return subprocess.run([sys.executable, str(REPO_ROOT / script), *args], cwd=REPO_ROOT,
                              env=child_env(), capture_output=True, text=True, timeout=240,
                              preexec_fn=limit)

    def test_export_and_train_name_the_file_and_leave_complete_files_unchanged(self):
        run = self.copy_run("disk_full_export")
        base = Path(self.get_temp_dir()) / "disk_full_base"
        before = snapshot(run)
        done = self.run_limited("export/export_saved_model.py",
                                [f"--workdir={run}", f"--export_base={base}"], 200_000)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertRegex(done.stderr, r"FATAL psmm-export: out of disk space \(.*saved_model.pb"
                                      r".*File too large\). Files complete before it are "
                                      r"unchanged")
        self.assertNotIn("Traceback", done.stderr)
        self.assertEqual(snapshot(run), before)
        self.assertEqual(list(base.iterdir()) if base.exists() else [], [])  # no partial version
        workdir = Path(self.get_temp_dir()) / "disk_full_train"
        shutil.rmtree(workdir, ignore_errors=True)
        args = ["--preset=tiny", "--dataset=synthetic", "--synthetic_train_tokens=4000",
                "--steps_per_epoch=6", "--epochs=1", "--checkpoint_every_steps=3",
                "--max_eval_tokens=300", "--verbose=0", f"--workdir={workdir}"]
        done = self.run_limited("trainers/train.py", args, 150_000)  # the first checkpoint
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertRegex(done.stderr, r"FATAL psmm-train: out of disk space \(.*File too large"
                                      r"\).*it resumes the run from its last checkpoint")
        self.assertNotIn("Traceback", done.stderr)
        self.assertFalse([p for p in workdir.rglob("*") if "tmp" in p.name], "temporary files")
        done = run_script("trainers/train.py", args)  # space again: the same command finishes
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(json.loads((workdir / "results.json").read_text())["global_step"], 6)


class OutOfMemoryTest(tf.test.TestCase):
    def test_a_model_larger_than_memory_is_one_line_and_writes_nothing(self):
        # Second sweep: `--hidden_dim=100000` ended in a ResourceExhaustedError traceback.
        workdir = Path(self.get_temp_dir()) / "too_large"
        done = run_script("trainers/train.py", [
            "--preset=tiny", "--dataset=synthetic", "--epochs=1", "--hidden_dim=1000000",
            f"--workdir={workdir}"])
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertRegex(done.stderr, r"FATAL psmm-train: out of memory \(OOM when allocating "
                                      r"tensor with shape\[.*--hidden_dim")
        self.assertNotIn("Traceback", done.stderr)
        self.assertFalse(workdir.exists())


class SignatureDtypeTest(tf.test.TestCase):
    """Wrong dtypes are named by every client before a request leaves (the signature's own
    error names the input by position only, and truncates a NumPy float array silently)."""

    def test_every_client_names_a_wrong_dtype(self):
        with socket.socket() as sock:  # nothing listens: the check must come first
            sock.bind(("127.0.0.1", 0))
            closed = sock.getsockname()[1]
        clients = {"local": LocalClient(testing.shared_export()[2]),
                   "rest": RestClient(f"http://127.0.0.1:{closed}", "psmm", timeout=5)}
        with contextlib.suppress(ImportError):
            from psmm_tf.export.clients import GrpcClient

            clients["grpc"] = GrpcClient(f"127.0.0.1:{closed}", "psmm", timeout=5)
        state = clients["local"].predict("initial_state",
                                          {"stream_ids": np.zeros([1], np.int32)})
        cases = [
            ("score", {"token_ids": np.array([[2.0, 3.5]]), "lengths": np.array([2], np.int32)},
             r"`token_ids` must be int32; got float64 values"),
            ("score", {"token_ids": np.array([[2, 3]], np.int32), "lengths": np.array([2.0])},
             r"`lengths` must be int32; got float64"),
            ("score_text", {"texts": np.array([1, 2])}, r"`texts` must hold strings"),
            ("predict_next", {"texts": np.array(["a"], object), "k": np.array(2.5)},
             r"`k` must be int32; got float64"),
            ("score_text_stream", {"texts": np.array(["a"], object), **state,
                                   "memory_mask": state["memory_mask"].astype(np.float32)},
             r"`memory_mask` must be bool; got float32"),
            ("score_text_stream", {"texts": np.array(["a"], object), **state,
                                   "lstm_state": state["lstm_state"].astype(str)},
             r"`lstm_state` must be float32; got <U"),
            ("initial_state", {"stream_ids": np.array([2**40])},
             r"`stream_ids` holds values outside the range of int32"),
        ]
        for name, client in clients.items():
            for signature, inputs, message in cases:
                with self.subTest(client=name, signature=signature, message=message):
                    with self.assertRaisesRegex(ServingError, message):
                        client.predict(signature, inputs)

    def test_empty_batches_and_huge_state_batches_are_refused_naming_the_input(self):
        client = LocalClient(testing.shared_export()[2])
        state = client.predict("initial_state", {"stream_ids": np.zeros([1], np.int32)})
        empty = np.array([], object)
        for signature, inputs in [
            ("score_text", {"texts": empty}),
            ("predict_next", {"texts": empty, "k": np.array(3, np.int32)}),
            ("score_text_stream", {"texts": empty, **{k: v[:0] for k, v in state.items()}}),
        ]:
            with self.subTest(signature=signature):
                with self.assertRaisesRegex(ServingError, r"`texts` is an empty batch"):
                    client.predict(signature, inputs)
        # A few bytes per stream would become ~100 KB of state each (2**31 streams took a
        # server's whole memory when initial_state took a scalar batch_size).
        with self.assertRaisesRegex(ServingError, rf"`stream_ids` holds too many streams: a "
                                                  rf"request starts at most {DEFAULT_MAX_TOKENS}; "
                                                  rf"got\] \[{DEFAULT_MAX_TOKENS + 1}\]"):
            client.predict("initial_state",
                           {"stream_ids": np.zeros([DEFAULT_MAX_TOKENS + 1], np.int32)})
        outputs = client.predict("score", {"token_ids": np.zeros([0, 3], np.int32),
                                           "lengths": np.zeros([0], np.int32)})
        self.assertEqual(outputs["log_probs"].shape, (0, 3))  # an empty id batch is fine


if __name__ == "__main__":
    tf.test.main()
