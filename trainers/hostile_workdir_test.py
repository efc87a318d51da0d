"""Hostile inputs (docs/hostile_inputs.md, "Workdirs and resuming"): A run's workdir: refused
starts, locks, resumes from damaged checkpoints and logs, a full disk. Each is refused with a
message naming it, and nothing a user has is touched (every pre-existing file byte-identical
afterwards)."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import tensorflow as tf

from psmm_tf import configs
from psmm_tf import testing as psmm_testing  # its TrainedRunTestCase: no tests of its own
from psmm_tf.evaluation import trained_run
from psmm_tf.export import export_saved_model, testing
from psmm_tf.testing import (
    REPO_ROOT,
    child_env,
    drop_file_permission_override,
    file_size_limit,
    main_in_process,
    run_script,
    snapshot,
    start_script,
    tiny_config,
    train_in_process,
    write_text_corpus,
)
from psmm_tf.training import checkpointing, reporting, run_setup, train_lib


class FailedStartTest(psmm_testing.TrainedRunTestCase):
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
            ("text", a_file, r"data_dir=.*corpus_is_a_file\): .* is not a folder; expected the "
                             r"folder of the corpus files"),
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


class WorkdirLockTest(psmm_testing.TrainedRunTestCase):
    def test_second_run_on_a_workdir_in_use_is_refused(self):
        workdir = self.copy_run("busy")
        with run_setup.workdir_lock(workdir) as lock:
            self.assertEqual(lock.read_text(), f"{os.getpid()}\n")
            before = snapshot(workdir)
            with self.assertRaisesRegex(run_setup.WorkdirLockedError,
                                        rf"busy is in use by another run \(pid {os.getpid()}, "
                                        rf"lock file .*busy/\.lock\)"):
                train_lib.run(tiny_config(), workdir, verbose=0)
            # psmm-train's main in this process (test_lock_of_a_killed_run_is_taken_over_saying_so
            # sees a lock held by another process).
            code, stderr = train_in_process([
                f"--workdir={workdir}", "--preset=tiny", "--synthetic_train_tokens=4000",
                "--steps_per_epoch=12", "--epochs=1", "--checkpoint_every_steps=5",
                "--max_eval_tokens=300"])
            self.assertNotEqual(code, 0)
            self.assertRegex(stderr, rf"FATAL The workdir .*busy is in use by another run "
                                     rf"\(pid {os.getpid()}")
            self.assertNotIn("Traceback", stderr)
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

    def test_a_lock_file_that_is_a_fifo_is_refused_and_not_waited_on(self):
        workdir = Path(self.get_temp_dir()) / "fifo_lock"
        workdir.mkdir(exist_ok=True)
        os.mkfifo(workdir / ".lock")
        before = snapshot(workdir)
        with self.assertRaisesRegex(run_setup.RunRefusedError,
                                    r"lock file .*fifo_lock/\.lock is not a regular file"):
            with run_setup.workdir_lock(workdir):
                pass
        self.assertIsNone(run_setup.lock_holder(workdir))  # opened without waiting for a writer
        self.assertEqual(snapshot(workdir), before)
        self.assertTrue((workdir / ".lock").is_fifo())

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


class ResumeTest(psmm_testing.TrainedRunTestCase):
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
        # Retraining would have replaced model.keras, results.json and cut
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
        code, stderr = train_in_process([
            "--preset=tiny", "--dataset=synthetic", "--synthetic_train_tokens=4000",
            "--steps_per_epoch=12", "--epochs=1", "--checkpoint_every_steps=5",
            "--max_eval_tokens=300", "--verbose=0", f"--workdir={workdir}"])
        self.assertNotEqual(code, 0)
        self.assertIn("--restart", stderr)
        self.assertEqual(snapshot(workdir), before)
        results = train_lib.run(tiny_config(), workdir, verbose=0, restart=True)
        self.assertEqual(results["global_step"], 12)
        previous = snapshot(workdir / "previous_run_1")
        for name in ("model.keras", "history.json", "results.json", "steps.jsonl"):
            self.assertEqual(previous[name], before[name], name)
        self.assertLen((workdir / "steps.jsonl").read_text().splitlines(), 12)
        self.assertLen(json.loads((workdir / "history.json").read_text()), 1)

    def test_damaged_run_logs_are_refused_before_training(self):
        # A cut history.json let a resume train a whole epoch, then failed with a
        # JSONDecodeError naming no file; a step with "global_step": "12" gave a TypeError.
        def cut_history(workdir):
            path = workdir / "history.json"
            path.write_text(path.read_text()[:40])

        def string_step(workdir):
            path = workdir / "steps.jsonl"
            lines = path.read_text().splitlines()
            lines[3] = lines[3].replace('"global_step": 4', '"global_step": "4"')
            path.write_text("\n".join(lines) + "\n")

        def emptied_history(workdir):  # the resumed history lacked epoch 0
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
        # Entries a user adds while a start runs are theirs.
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
        # One rule at the top level and inside a section.
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

    def test_other_epochs_on_a_run_stopped_by_patience_say_why_no_epoch_runs(self):
        # --epochs=5 on a run the paper's rule had stopped (patience) ran no
        # epoch and made its results again, saying nothing. Not refused: --compare_baseline
        # resumed with more epochs must still train the half the rule has not stopped.
        workdir = Path(self.get_temp_dir()) / "stopped_by_patience"
        shutil.rmtree(workdir, ignore_errors=True)
        # A learning rate of 30 makes the second epoch's validation worse: patience=1 stops
        # the run there, before its max_epochs=3.
        flags = ["--preset=tiny", "--dataset=synthetic", "--synthetic_train_tokens=4000",
                 "--steps_per_epoch=6", "--checkpoint_every_steps=6", "--max_eval_tokens=100",
                 "--patience=1", "--learning_rate=30", "--clip_norm=0.25", "--verbose=0",
                 f"--workdir={workdir}"]
        code, stderr = train_in_process([*flags, "--epochs=3"])
        self.assertEqual(code, 0, stderr[-3000:])
        history = json.loads((workdir / "history.json").read_text())
        self.assertEqual([record["improved"] for record in history], [True, False],
                         "the run was not stopped by patience after epoch 2")
        before = snapshot(workdir)
        for epochs in (3, 5):
            with self.subTest(epochs=epochs):
                with self.assertLogs(level="INFO") as logs:
                    code, stderr = train_in_process([*flags, f"--epochs={epochs}"])
                self.assertEqual(code, 0, stderr[-3000:])
                logged = "\n".join(logs.output)
                warning = (
                    rf"{workdir}'s run was stopped after epoch 2 by the paper's rule: "
                    rf"patience=1 epoch\(s\) without a new best validation perplexity \(best "
                    rf"[\d.]+\). --epochs=5 \(train.max_epochs; its config.json records 3\) "
                    rf"cannot change that: .*its results are made again. To train on, start a "
                    rf"new run from its best model: psmm-train --init_from={workdir} --workdir=")
                if epochs == 5:
                    self.assertRegex(logged, warning)
                else:  # the run's own command: nothing to say
                    self.assertNotRegex(logged, "cannot change that")
                self.assertNotIn("Traceback", stderr)
                self.assertEqual(json.loads((workdir / "results.json").read_text())["epochs"],
                                 2)
                self.assertEqual((workdir / "history.json").read_bytes(),
                                 before["history.json"])

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


class WorkdirSweepTest(psmm_testing.TrainedRunTestCase):
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
            (tiny_config().replace(model={"initial_gate": 0.3}),
             r"another config \(model.initial_gate: None -> 0.3\)"),
            (small, r"holds a run with another config \(.*model.hidden_dim: 16 -> 200"),
        ]:
            with self.subTest(message=message):
                with self.assertRaisesRegex(run_setup.RunRefusedError, message):
                    train_lib.run(config, workdir, verbose=0)
                self.assertEqual(snapshot(workdir), before)
        # A config.json listing every kind's settings (psmm_tf wrote them all before they were
        # the kinds' own) resumes with the same config.
        fields = json.loads((workdir / "config.json").read_text())
        fields["model"]["switch_units"] = 64
        (workdir / "config.json").write_text(json.dumps(fields))
        resumed, _ = run_setup.prepare_workdir(tiny_config(), workdir, tf.distribute.get_strategy())
        self.assertEqual((resumed.model.initial_gate, resumed.model.hyperparameters), (None, {}))
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

    # The flags of `tiny_config()`, the runs `trained_tiny_run` trains.
    TINY_FLAGS = ["--preset=tiny", "--dataset=synthetic", "--synthetic_train_tokens=4000",
                  "--steps_per_epoch=12", "--epochs=1", "--checkpoint_every_steps=5",
                  "--max_eval_tokens=300", "--verbose=0"]

    def test_a_comparison_and_a_single_run_are_refused_in_the_other_mode(self):
        # psmm-train without --compare_baseline on a comparison's folder started
        # a new run beside its two; --compare_baseline on a run's folder nested two runs in it.
        root = Path(self.get_temp_dir())
        parent = root / "comparison"
        shutil.rmtree(parent, ignore_errors=True)
        parent.mkdir()
        for kind in ("psmm", "lstm"):  # the runs --compare_baseline trains with these flags
            shutil.copytree(psmm_testing.trained_tiny_run(kind), parent / kind)
        single = self.copy_run("single_run")
        before = {parent: snapshot(parent), single: snapshot(single)}
        for args, folder, message in [
            ([f"--workdir={parent}"], parent,
             f"FATAL {parent} holds a --compare_baseline comparison ({parent}/psmm, {parent}/"
             f"lstm: a run each), not a run of its own: without --compare_baseline, psmm-train "
             f"would start a new run beside them. Resume the comparison with psmm-train "
             f"--compare_baseline --workdir={parent}, or one of its runs with --workdir="
             f"{parent}/psmm; or give another --workdir."),
            (["--compare_baseline", f"--workdir={single}"], single,
             f"FATAL {single} holds a training run (config.json, checkpoints, model.keras, "
             f"history.json, steps.jsonl, results.json, initial_pointer.npz, tensorboard), not "
             f"a --compare_baseline comparison: --compare_baseline would start its runs inside "
             f"it ({single}/psmm, {single}/lstm). Resume the run with psmm-train --workdir="
             f"{single} without --compare_baseline, or give --compare_baseline another "
             f"--workdir."),
        ]:
            with self.subTest(args=args[0]):
                code, stderr = train_in_process([*self.TINY_FLAGS, *args])
                self.assertEqual(code, 1, stderr[-3000:])
                self.assertIn(message, stderr)
                self.assertNotIn("Traceback", stderr)
                self.assertEqual(snapshot(folder), before[folder])
        with self.subTest(args="--char_output_on"):
            code, stderr = train_in_process([f"--char_output_on={single}",
                                             f"--workdir={parent}", "--verbose=0"])
            self.assertEqual(code, 1, stderr[-3000:])
            self.assertIn(f"FATAL {parent} holds a --compare_baseline comparison", stderr)
            self.assertIn("a character-output run needs a folder of its own", stderr)
            self.assertEqual(snapshot(parent), before[parent])
        # The command the refusal names resumes the comparison (both runs finished: their
        # results again).
        code, stderr = train_in_process([*self.TINY_FLAGS, "--compare_baseline",
                                         f"--workdir={parent}"])
        self.assertEqual(code, 0, stderr[-3000:])
        self.assertEqual(sorted(os.listdir(parent)), ["lstm", "psmm"])

    def test_a_vocabulary_without_its_run_is_refused(self):
        # A new run adopted any vocab.txt in its workdir, --min_count and
        # --max_vocab_size then ignored (a user's 3-word file: a run of 3 words).
        root = Path(self.get_temp_dir())
        for names in (("vocab.txt",), ("vocab.sha256",), ("vocab.txt", "vocab.sha256")):
            with self.subTest(names=names):
                workdir = root / f"stray_{'_'.join(names)}"
                shutil.rmtree(workdir, ignore_errors=True)
                workdir.mkdir()
                for name in names:
                    (workdir / name).write_text("<unk>\n<eos>\nthe\n" if name == "vocab.txt"
                                                else f"{'0' * 64}  vocab.txt\n")
                before = snapshot(workdir)
                files = " and ".join(str(workdir / name) for name in names)
                them = "them" if len(names) > 1 else "it"
                message = (f"{files}: {workdir} holds no run for {them} (no config.json, no "
                           f"checkpoint; a run writes its vocab.txt with its config.json), and a "
                           f"new run would ")
                with self.assertRaisesRegex(run_setup.RunRefusedError, re.escape(message)):
                    train_lib.run(tiny_config(), workdir, verbose=0)
                self.assertEqual(snapshot(workdir), before)
                code, stderr = train_in_process([*self.TINY_FLAGS, f"--workdir={workdir}"])
                self.assertEqual(code, 1, stderr[-3000:])
                self.assertIn(f"FATAL {message}", stderr)
                self.assertIn(f"Move {them} out of {workdir}, or give another --workdir.",
                              stderr)
                self.assertNotIn("Traceback", stderr)
                self.assertEqual(snapshot(workdir), before)
        # A run that lost its config.json resumes from its checkpoints with its own vocabulary
        # (FailedStartTest.test_lost_config_resumed_with_other_flags_writes_no_config), and the
        # corrected command of a refused one trains its corpus's vocabulary.
        (workdir / "vocab.txt").rename(root / "users_vocab.txt")
        (workdir / "vocab.sha256").unlink()
        results = train_lib.run(tiny_config(steps_per_epoch=2), workdir, verbose=0)
        self.assertEqual(results["global_step"], 2)
        self.assertGreater(len((workdir / "vocab.txt").read_text().split()), 3)

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
                              env=env, preexec_fn=drop_file_permission_override, timeout=240)
        try:
            self.assertEqual(done.returncode, 0, done.stderr[-3000:])
            self.assertRegex(done.stdout, r"TRAIN Cannot write the lock file .*read_only/run/"
                                          r"\.lock \(is the workdir writable\?\): Permission")
            self.assertRegex(done.stdout, r"TRAIN Cannot create the workdir .*read_only/new_run:"
                                          r" Permission denied")
            self.assertRegex(done.stdout, r"EVALUATE output_dir=.*read_only/run/report: cannot "
                                          r"create it or write into it \(Permission denied\)")
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
        code, stderr = train_in_process([f"--workdir={workdir}",
                                          f"--input_output_gate_on={base}"])
        self.assertEqual(code, 1)
        self.assertRegex(stderr, r"--input_output_gate_on=.*gate_base: .*gate_base has no "
                                 r"vocab.txt")
        self.assertNotIn("Traceback", stderr)
        self.assertFalse(workdir.exists())
        self.assertEqual(snapshot(base), before)


class DiskFullTest(psmm_testing.TrainedRunTestCase):
    """A full disk, made real with a file-size limit (`file_size_limit`: writes past it fail
    with EFBIG, "File too large", as they fail with ENOSPC on a full disk). The programs run in
    this process (`main_in_process`), the limit set around each."""

    def test_export_and_train_name_the_file_and_leave_complete_files_unchanged(self):
        run = self.copy_run("disk_full_export")
        base = Path(self.get_temp_dir()) / "disk_full_base"
        before = snapshot(run)
        with file_size_limit(200_000):
            # The checkpoint: model.keras, a finished run's default, is unpacked to a temporary
            # file when read, which a limit this low refuses before the export is written.
            code, stderr = main_in_process(export_saved_model.main, [
                "psmm-export", f"--workdir={run}", f"--export_base={base}",
                "--model_source=latest"])
        self.assertEqual(code, 1, stderr)
        self.assertRegex(stderr, r"FATAL psmm-export: out of disk space \(.*saved_model.pb"
                                 r".*File too large\). Files complete before it are unchanged")
        self.assertNotIn("Traceback", stderr)
        self.assertEqual(snapshot(run), before)
        self.assertEqual(list(base.iterdir()) if base.exists() else [], [])  # no partial version
        workdir = Path(self.get_temp_dir()) / "disk_full_train"
        shutil.rmtree(workdir, ignore_errors=True)
        args = ["--preset=tiny", "--dataset=synthetic", "--synthetic_train_tokens=4000",
                "--steps_per_epoch=6", "--epochs=1", "--checkpoint_every_steps=3",
                "--max_eval_tokens=300", "--verbose=0", f"--workdir={workdir}"]
        with file_size_limit(150_000):  # the first checkpoint
            code, stderr = train_in_process(args)
        self.assertEqual(code, 1, stderr)
        self.assertRegex(stderr, r"FATAL psmm-train: out of disk space \(.*File too large"
                                 r"\).*it resumes the run from its last checkpoint")
        self.assertNotIn("Traceback", stderr)
        self.assertFalse([p for p in workdir.rglob("*") if "tmp" in p.name], "temporary files")
        code, stderr = train_in_process(args)  # space again: the same command finishes
        self.assertEqual(code, 0, stderr)
        self.assertEqual(json.loads((workdir / "results.json").read_text())["global_step"], 6)


class InitFromTest(psmm_testing.TrainedRunTestCase):
    """--init_from=RUN while RUN trains read a model.keras that RUN
    replaces after, and the new run recorded only RUN's path."""

    def test_a_run_in_progress_is_refused_and_the_model_started_from_is_recorded(self):
        run = self.copy_run("init_source")
        before = snapshot(run)
        workdir = Path(self.get_temp_dir()) / "init_target"
        shutil.rmtree(workdir, ignore_errors=True)
        config = tiny_config(steps_per_epoch=2, max_eval_tokens=100)
        with run_setup.workdir_lock(run):
            for source in (run, run / "model.keras"):
                with self.subTest(init_from=source):
                    with self.assertRaisesRegex(
                            run_setup.RunRefusedError,
                            rf"init_from {source}: the run in {run} is still training \(pid "
                            rf"{os.getpid()} holds {run}/.lock\), and its model.keras is "
                            rf"replaced at every improving validation"):
                        train_lib.run(config.replace(train={"init_from": str(source)}), workdir,
                                      verbose=0)
                    self.assertFalse(workdir.exists())
        self.assertEqual(snapshot(run), before)
        train_lib.run(config.replace(train={"init_from": str(run)}), workdir, verbose=0)
        stored = configs.ExperimentConfig.from_json((workdir / "config.json").read_text())
        self.assertEqual(stored.train.init_from, str(run))
        self.assertEqual(stored.train.init_from_sha256,
                         hashlib.sha256((run / "model.keras").read_bytes()).hexdigest())


class CharOutputBaseTest(psmm_testing.TrainedRunTestCase):
    """--char_output_on=<a file> was a NotADirectoryError traceback,
    and a run killed before its first model.keras advised a flag psmm-train does not have."""

    def test_a_file_or_a_run_without_its_model_is_refused_naming_it(self):
        root = Path(self.get_temp_dir())
        note = root / "notes.txt"
        note.write_text("not a run\n")
        killed = self.copy_run("killed_before_validation")
        for name in ("model.keras", "results.json", "history.json"):
            (killed / name).unlink(missing_ok=True)
        before = snapshot(killed)
        workdir = root / "char_never"
        for base, message in [
            (note, rf"FATAL {note} is a file, not a folder: expected the folder of a training "
                   rf"run"),
            (killed, rf"FATAL {killed} holds no model.keras yet .* resume that run \(psmm-train "
                     rf"--workdir={killed}\) until it has one"),
        ]:
            with self.subTest(base=base.name):
                code, stderr = train_in_process([f"--char_output_on={base}",
                                                  f"--workdir={workdir}"])
                self.assertEqual(code, 1, stderr)
                self.assertRegex(stderr, message)
                self.assertNotIn("Traceback", stderr)
                self.assertNotIn("model_source", stderr)
                self.assertFalse(workdir.exists())
        self.assertEqual(snapshot(killed), before)
        self.assertEqual(note.read_text(), "not a run\n")


class CharOutputWorkdirTest(psmm_testing.TrainedRunTestCase):
    """A character-output run ignored --restart, retrained over a CHARS folder
    whose checkpoints were removed (replacing its model.keras, history.json and results.json),
    trained an epoch before a file `checkpoints` failed with a traceback, and trained on, or
    gated, a base run still training; a gate on a run with a damaged config.json was a bare
    `Expecting value`."""

    CHAR_FLAGS = ["--epochs=1", "--steps_per_epoch=3", "--max_eval_tokens=100",
                  "--char_output_units=8", "--verbose=0"]

    def test_a_trained_run_without_checkpoints_is_refused_unless_restarted(self):
        base = self.copy_run("chars_base")
        root = Path(self.get_temp_dir())
        trained = root / "chars_trained"
        shutil.rmtree(trained, ignore_errors=True)
        code, stderr = train_in_process([f"--char_output_on={base}", f"--workdir={trained}",
                                         *self.CHAR_FLAGS])
        self.assertEqual(code, 0, stderr)

        def damaged(name, checkpoints):
            """A copy of the trained run whose checkpoints/ is removed or a file."""
            chars = root / name
            shutil.rmtree(chars, ignore_errors=True)
            shutil.copytree(trained, chars)
            shutil.rmtree(chars / "checkpoints")
            if checkpoints == "a file":
                (chars / "checkpoints").write_text("not a folder\n")
            return chars, [f"--char_output_on={base}", f"--workdir={chars}", *self.CHAR_FLAGS]

        with self.subTest(checkpoints="removed"):
            chars, args = damaged("chars_no_checkpoints", "removed")
            before = snapshot(chars)
            self.assertTrue({"model.keras", "history.json", "results.json", "steps.jsonl"}
                            <= set(before))
            code, stderr = train_in_process(args)
            self.assertEqual(code, 1, stderr)
            self.assertIn(f"FATAL {chars} holds a trained run (history.json, model.keras, "
                          f"results.json) but no checkpoint to resume it from ({chars}/"
                          f"checkpoints is missing or empty). Training again would replace its "
                          f"results: pass --restart", stderr)
            self.assertNotIn("Traceback", stderr)
            self.assertEqual(snapshot(chars), before)
        for extra in ([], ["--restart"]):  # named before training, with --restart too
            with self.subTest(checkpoints="a file", extra=extra):
                chars, args = damaged("chars_checkpoints_file", "a file")
                before = snapshot(chars)
                code, stderr = train_in_process([*args, *extra])
                self.assertEqual(code, 1, stderr)
                self.assertIn(f"FATAL {chars}/checkpoints is not a folder: expected the run's "
                              f"checkpoints folder. Move it away (a run without checkpoints "
                              f"starts again only with --restart).", stderr)
                self.assertNotIn("Traceback", stderr)
                self.assertEqual(snapshot(chars), before)
        with self.subTest(checkpoints="removed", extra=["--restart"]):
            # --restart moves the previous run aside, whole, and trains again from scratch.
            chars, args = damaged("chars_restarted", "removed")
            before = snapshot(chars)
            code, stderr = train_in_process([*args, "--restart"])
            self.assertEqual(code, 0, stderr)
            previous = snapshot(chars / "previous_run_1")
            for name in ("model.keras", "history.json", "results.json", "steps.jsonl"):
                self.assertEqual(previous[name], before[name], name)
            self.assertEqual(snapshot(chars)["char_output.json"], before["char_output.json"])
            self.assertTrue((chars / "checkpoints").is_dir())
            history = json.loads((chars / "history.json").read_text())
            self.assertEqual([record["epoch"] for record in history], [1])

    def test_a_character_output_run_without_char_output_on_is_refused(self):
        # psmm-train --workdir=CHARS without --char_output_on built a language
        # model's run there, then failed restoring CHARS's checkpoints with a message that
        # called them damaged and advised moving the folder away to start a new run.
        base = self.copy_run("chars_resume_base")
        chars = Path(self.get_temp_dir()) / "chars_resumed_plain"
        shutil.rmtree(chars, ignore_errors=True)
        code, stderr = train_in_process([f"--char_output_on={base}", f"--workdir={chars}",
                                         *self.CHAR_FLAGS])
        self.assertEqual(code, 0, stderr)
        before = snapshot(chars)
        tiny = WorkdirSweepTest.TINY_FLAGS  # the flags of the base run itself
        for args, mode in [([], "a language model's run: without --char_output_on, psmm-train "
                                "would start one over its files"),
                           (tiny, "a language model's run: without --char_output_on, psmm-train "
                                  "would start one over its files"),
                           ([*tiny, "--compare_baseline"],
                            "a --compare_baseline comparison: --compare_baseline would start "
                            "its runs in it"),
                           ([f"--input_output_gate_on={base}"], "a language model's run")]:
            with self.subTest(args=args):
                code, stderr = train_in_process([*args, f"--workdir={chars}"])
                self.assertEqual(code, 1, stderr[-3000:])
                self.assertIn(f"FATAL {chars} holds a character-output run ({chars}/"
                              f"char_output.json), not {mode}", stderr)
                self.assertIn(f"Resume it with psmm-train --char_output_on={base} --workdir="
                              f"{chars} (its base run, as char_output.json records, and the "
                              f"flags it was started with), or give another --workdir.", stderr)
                self.assertNotIn("Traceback", stderr)
                self.assertNotIn("damaged", stderr)
                self.assertEqual(snapshot(chars), before)
        # The command it names resumes the run (finished: its results again).
        code, stderr = train_in_process([f"--char_output_on={base}", f"--workdir={chars}",
                                         *self.CHAR_FLAGS])
        self.assertEqual(code, 0, stderr[-3000:])
        self.assertEqual(snapshot(chars)["history.json"], before["history.json"])

    def test_a_base_run_still_training_or_with_a_damaged_config_is_refused(self):
        base = self.copy_run("training_base")
        before = snapshot(base)
        root = Path(self.get_temp_dir())
        chars, gate = root / "chars_on_training", root / "gate_on_training"
        with run_setup.workdir_lock(base):
            for flag, target, message in [
                ("char_output_on", chars,
                 rf"FATAL {base} is still training \(pid {os.getpid()} holds {base}/.lock\), "
                 rf"and its model.keras is replaced at every improving validation. Wait for it "
                 rf"to end before training a character output on its model."),
                ("input_output_gate_on", gate,
                 rf"--input_output_gate_on={base}: {base} is still training \(pid "
                 rf"{os.getpid()} holds {base}/.lock\), and its model.keras is replaced at every "
                 rf"improving validation. Wait for it to end"),
            ]:
                with self.subTest(flag=flag, base="training"):
                    code, stderr = train_in_process([f"--{flag}={base}", f"--workdir={target}",
                                                     *(self.CHAR_FLAGS if target == chars
                                                       else ["--verbose=0"])])
                    self.assertEqual(code, 1, stderr)
                    self.assertRegex(stderr, message)
                    self.assertNotIn("Traceback", stderr)
                    self.assertFalse(target.exists())
            self.assertEqual(snapshot(base), {**before, ".lock": f"{os.getpid()}\n".encode()})
        self.assertEqual(snapshot(base), before)
        (base / "config.json").write_text("")
        before = snapshot(base)
        chars, gate = root / "chars_on_damaged", root / "gate_on_damaged"
        expected = (rf"{base}/config.json is not a training run's config \(JSONDecodeError: "
                    rf"Expecting value: line 1 column 1 \(char 0\)\); restore it from a backup")
        for flag, target, prefix in [("char_output_on", chars, "FATAL "),
                                     ("input_output_gate_on", gate,
                                      f"--input_output_gate_on={base}: ")]:
            with self.subTest(flag=flag, base="damaged config.json"):
                code, stderr = train_in_process([f"--{flag}={base}", f"--workdir={target}",
                                                 "--verbose=0"])
                self.assertEqual(code, 1, stderr)
                self.assertRegex(stderr, re.escape(prefix) + expected)
                self.assertNotIn("Traceback", stderr)
                self.assertFalse(target.exists())
        self.assertEqual(snapshot(base), before)


class InterruptTest(tf.test.TestCase):
    """Ctrl-C during epoch 1 was a 65-line KeyboardInterrupt traceback,
    and the resumed run printed TensorFlow's warnings of unrestored `(root).vocabulary`."""

    def test_ctrl_c_is_one_line_and_exit_130_and_the_resume_warns_of_nothing(self):
        workdir = Path(self.get_temp_dir()) / "interrupted"
        shutil.rmtree(workdir, ignore_errors=True)
        # 200 updates: 175 left after the first checkpoint (update 25) for the signal, however
        # fast the CPU and however late this process polls (every 0.05 s); the resume trains
        # them all.
        args = ["--preset=tiny", "--dataset=synthetic", "--synthetic_train_tokens=50000",
                "--steps_per_epoch=200", "--epochs=1", "--checkpoint_every_steps=25",
                "--max_eval_tokens=100", "--verbose=0", f"--workdir={workdir}"]
        child = start_script("trainers/train.py", args, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 240
            while not list((workdir / "checkpoints").glob("ckpt-*.index")):
                self.assertIsNone(child.poll(), "psmm-train ended before its first checkpoint")
                self.assertLess(time.monotonic(), deadline, "no checkpoint after 240 s")
                time.sleep(0.05)
            child.send_signal(signal.SIGINT)
            _, stderr = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
        self.assertEqual(child.returncode, 130, stderr)
        self.assertNotIn("Traceback", stderr)
        self.assertNotIn("KeyboardInterrupt", stderr)
        self.assertRegex(stderr, r"psmm-train: interrupted \(Ctrl-C\). Files complete before it "
                                 r"are unchanged; the same command resumes the run from its "
                                 r"last checkpoint.")
        self.assertFalse((workdir / ".lock").exists())
        done = run_script("trainers/train.py", args)  # resumes
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(json.loads((workdir / "results.json").read_text())["global_step"], 200)
        for warning in ("could not be found in the restored object", "Unresolved object",
                        "(root).vocabulary", "Traceback"):
            self.assertNotIn(warning, done.stderr)


if __name__ == "__main__":
    tf.test.main()
