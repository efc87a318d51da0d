"""Hostile inputs (docs/hostile_inputs.md, "psmm-export"): psmm-export on damaged or mismatched
runs, checkpoints, sources and export bases. Each is refused with a message naming it, and nothing a
user has is touched (every pre-existing file byte-identical afterwards)."""

import contextlib
import io
import json
import os
import shutil
import stat
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from psmm_tf import configs
from psmm_tf import testing as psmm_testing  # its TrainedRunTestCase: no tests of its own
from psmm_tf import workdir as run_files
from psmm_tf.export import score, testing
from psmm_tf.export.clients import LocalClient
from psmm_tf.testing import mains_in_one_process, run_script, snapshot, truncate


class ExportTest(psmm_testing.TrainedRunTestCase):
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
        for index, (argv, message) in enumerate([
            ([f"--workdir={run}", "--model_version=0"],
             r"flag --model_version=0: must be an integer in \[1, 2\*\*63\)"),
            # Accepted before, though TF Serving's versions are int64.
            ([f"--workdir={run}", "--model_version=99999999999999999999"],
             r"flag --model_version=99999999999999999999: must be an integer in \[1, 2\*\*63\)"),
            ([f"--workdir={run}", "--max_request_tokens=1"],
             r"flag --max_request_tokens=1: 1 is not an integer in the range \[2, 2147483647\]"),
            # Accepted before: the export's int32 checks then refused every initial_state.
            ([f"--workdir={run}", "--max_request_tokens=2147483648"],
             r"flag --max_request_tokens=2147483648: 2147483648 is not an integer in the range "
             r"\[2, 2147483647\]"),
            ([f"--workdir={run}", f"--vocab={permuted}"],
             r"psmm-export: Vocabulary .*permuted_vocab.txt is not the one the model of "
             r".*export_run was trained with"),
            ([f"--keras_model={run / 'model.keras'}", f"--vocab={permuted}"],
             r"Vocabulary .*permuted_vocab.txt is not the one"),
            ([f"--checkpoint={run / 'checkpoints'}", f"--config={run / 'config.json'}",
              f"--vocab={permuted}"], r"Vocabulary .*permuted_vocab.txt is not the one"),
        ]):
            with self.subTest(argv=argv):
                base = Path(self.get_temp_dir()) / f"exports_{index}"  # one case's failure each
                code, _, stderr = testing.run_export_main([*argv, f"--export_base={base}"])
                self.assertNotEqual(code, 0)
                self.assertRegex(stderr, message)
                self.assertFalse(base.exists())
        self.assertEqual(snapshot(run), before)

    def test_a_model_keras_of_another_run_is_refused(self):
        # Another run's model.keras (hidden 32) in a hidden-16 run was
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
        # vocab.txt and vocab.sha256 of another run agree with each other;
        # psmm-evaluate then reported 100.08 where the true perplexity was 33.16.
        # Also one of another size (tracebacks before: an index out of [0, V), a broadcast).
        def swapped(tokens):
            return tokens[:5] + [tokens[6], tokens[5]] + tokens[7:]

        cases, runs = [], {}  # (vocabulary, source, run, message); the runs' files before
        for name, damage in (("swapped", swapped), ("shorter", lambda tokens: tokens[:40])):
            run = self.copy_run(f"{name}_vocabulary")
            tokens = damage((run / "vocab.txt").read_text().splitlines())
            (run / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
            run_files.write_vocabulary_hash(run)
            runs[run] = snapshot(run)
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
                cases.append((name, source, run, message))
            self.assertFalse(base.exists())
        # psmm-evaluate of the same four, in one child (one TensorFlow start).
        results = mains_in_one_process("psmm_tf.trainers.evaluate", [
            ["psmm-evaluate", f"--workdir={run}", f"--model_source={source}", "--max_tokens=50"]
            for _, source, run, _ in cases])
        for (name, source, _, message), (code, stderr) in zip(cases, results, strict=True):
            with self.subTest(vocabulary=name, source=source, program="psmm-evaluate"):
                self.assertEqual(code, 1, stderr[-2000:])
                self.assertRegex(stderr, message)
        for run, before in runs.items():
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


class ExportSweepTest(psmm_testing.TrainedRunTestCase):
    def test_damaged_checkpoints_fall_back_or_name_the_files(self):
        from psmm_tf.export import export_lib

        run = self.copy_run("export_damaged")
        truncate(run / "checkpoints" / "ckpt-12.data-00000-of-00001")

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
        plain_keras = root / "plain" / "model.keras"
        plain_keras.parent.mkdir(exist_ok=True)
        keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]).save(plain_keras)
        shutil.copy(run / "vocab.sha256", plain_keras.parent / "vocab.sha256")
        binary = root / "binary"
        binary.mkdir(exist_ok=True)
        (binary / "config.json").write_bytes(b"\xff\xfe{}")
        shutil.copy(run / "model.keras", binary / "model.keras")
        (binary / "vocab.sha256").write_bytes(b"\xffnot a hash")
        fifo = root / "config_fifo"
        if not fifo.exists():
            os.mkfifo(fifo)
        last = root / "last_version"
        (last / str(2**63 - 1)).mkdir(parents=True, exist_ok=True)
        (last / "\u00b2").mkdir(exist_ok=True)  # "²".isdigit(): was read as a version
        for argv, base, message in [
            # Was an AttributeError ('Sequential' object has no attribute 'vocab_size') after
            # the new export base was made, and left it.
            ([f"--keras_model={plain_keras}", f"--vocab={run / 'vocab.txt'}"],
             root / "new base ü", r"plain/model.keras holds a Sequential, not a psmm_tf "
                                  r"language model"),
            # Both were the codec's message alone, naming no file.
            ([f"--keras_model={binary / 'model.keras'}", f"--vocab={run / 'vocab.txt'}"],
             root / "b5",
             r"binary/vocab.sha256 is not UTF-8 text \(byte 0: b'\\xff'\); expected the sha256 "
             r"of the run's vocabulary"),
            ([f"--keras_model={run / 'model.keras'}", f"--vocab={run / 'vocab.txt'}",
              f"--config={binary / 'config.json'}"], root / "b5",
             r"binary/config.json is not UTF-8 text \(byte 0: b'\\xff'\); expected a training "
             r"run's config.json"),
            # Waited for a writer without end.
            ([f"--keras_model={run / 'model.keras'}", f"--vocab={run / 'vocab.txt'}",
              f"--config={fifo}"], root / "b5",
             r"config_fifo is not a regular file \(a folder, FIFO or device\); expected a "
             r"training run's config.json"),
            # Was a ValueError traceback after the model loaded ("version must be ... got
            # 9223372036854775808").
            ([f"--workdir={run}"], last,
             r"--export_base=.*last_version holds version 9223372036854775807, TF Serving's "
             r"largest \(int64\): no next version; give --model_version=N"),
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
            # Before: exported into taken_base/1/1 (exit 0).
            ([f"--workdir={run}"], taken / "1",
             rf"psmm-export: --export_base={taken / '1'} is a SavedModel version folder \(it "
             rf"holds saved_model.pb\); expected the folder of the versions: its parent, "
             rf"--export_base={taken}\?"),
        ]:
            with self.subTest(argv=argv, base=base):
                before = {path: snapshot(path) for path in (run, taken, last, binary)}
                code, _, stderr = testing.run_export_main([*argv, f"--export_base={base}"])
                self.assertEqual(code, 1)
                self.assertRegex(stderr, message)
                self.assertNotIn("Traceback", stderr)
                self.assertEqual({path: snapshot(path) for path in (run, taken, last, binary)},
                                 before)
                self.assertFalse(base.exists() and base.is_dir()
                                 and base not in (taken, taken / "1", last))
        self.assertEqual(sorted(p.name for p in last.iterdir()), ["9223372036854775807", "²"])
        # "²" is no version; "003" is version 3, as TF Serving reads it.
        from psmm_tf.export.clients import resolve_export_dir

        (last / "003").mkdir(exist_ok=True)
        (last / "003" / "saved_model.pb").write_bytes(b"a version's file")
        self.assertEqual(resolve_export_dir(str(last), 3), str(last / "003"))
        self.assertEqual(resolve_export_dir(str(last / "003"), 3), str(last / "003"))
        self.assertEqual(a_file.read_text(), "mine\n")
        self.assertEqual(sorted(p.name for p in taken.iterdir()), ["1"])
        self.assertEqual(sorted(p.name for p in (taken / "1").iterdir()), ["saved_model.pb"])
        # The library refuses both before writing anything (the model is not even read).
        from psmm_tf.export import export_lib

        for base, max_tokens, message in [
            (root / "b4", 2**31, r"max_tokens \(--max_request_tokens\) must be an integer in "
                                 r"\[2, 2\*\*31 - 1\] .*, got 2147483648"),
            (root / "b4", 1, r"must be an integer in \[2, 2\*\*31 - 1\]"),
            (taken / "1", 100, r"taken_base/1 is a SavedModel version folder"),
        ]:
            with self.subTest(base=base, max_tokens=max_tokens):
                with self.assertRaisesRegex(ValueError, message):
                    export_lib.export(None, str(run / "vocab.txt"), str(base),
                                      max_tokens=max_tokens)
                self.assertFalse((root / "b4").exists())
                self.assertEqual(sorted(p.name for p in (taken / "1").iterdir()),
                                 ["saved_model.pb"])
        with self.assertRaises(AttributeError):  # no model: fails inside the export
            export_lib.export(None, str(run / "vocab.txt"), str(root / "b6" / "deep"))
        self.assertFalse((root / "b6").exists())  # the folders it made are gone with it


class ExportVocabularyTest(tf.test.TestCase):
    def test_an_edited_vocabulary_asset_changes_nothing_scored(self):
        # Another run's vocab.txt copied over an export's assets/vocab.txt was
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


class DefaultExportTest(psmm_testing.TrainedRunTestCase):
    """psmm-export's default (the newest checkpoint) of a finished run
    was another model than its model.keras: the last weights rather than the best, without the
    gate's calibration, which training fits after its last checkpoint into model.keras alone."""

    def test_a_finished_run_exports_its_model_keras_and_a_running_one_its_checkpoint(self):
        from psmm_tf.export import export_lib

        run = self.copy_run("default_export")
        results = json.loads((run / "results.json").read_text())
        self.assertIn("gate_calibration", results)  # the tiny preset's sentinel gate is fitted
        best, _ = run_files.load_model(run, "best")
        latest, _ = run_files.load_model(run, "latest")
        self.assertIsNotNone(best.pointer.gate_calibration)
        self.assertIsNone(latest.pointer.gate_calibration)  # what the default exported before
        before = snapshot(run)
        base = Path(self.get_temp_dir()) / "default_export_base"
        code, stdout, stderr = testing.run_export_main([f"--workdir={run}",
                                                        f"--export_base={base}"])
        self.assertEqual(code, 0, stderr)
        self.assertIn(f"best (model.keras): {run / 'model.keras'}", stdout + stderr)
        self.assertEqual(snapshot(run), before)
        # A run not finished (no results.json): its newest checkpoint, named so.
        (run / "results.json").unlink()
        self.assertEqual(export_lib.default_model_source((run / "config.json").read_text(),
                                                         str(run)), "latest")
        code, stdout, stderr = testing.run_export_main([f"--workdir={run}",
                                                        f"--export_base={base}"])
        self.assertEqual(code, 0, stderr)
        self.assertIn(f"latest (latest checkpoint): {run / 'checkpoints' / 'ckpt-12'}",
                      stdout + stderr)


if __name__ == "__main__":
    tf.test.main()
