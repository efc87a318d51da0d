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
from pathlib import Path

import numpy as np
import tensorflow as tf
from train_testlib import REPO_ROOT, run_script, tiny_config

from psmm_tf.export import score, testing
from psmm_tf.export.clients import LocalClient, RestClient, ServingError
from psmm_tf.export.serving_module import DEFAULT_MAX_TOKENS, ServingModule
from psmm_tf.models import NeuralCache
from psmm_tf.training import checkpointing, evaluation_report, reporting, run_setup, train_lib


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
        with self.assertRaisesRegex(evaluation_report.RunLoadError,
                                    r"data_dir=.*user_corpus3: the run .* synthetic corpus"):
            evaluation_report.load_trained_run(run, data_dir=data)
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
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="3")
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
                                 rf"Checkpoint .*{damage.__name__}/checkpoints/ckpt-12 .* cannot "
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
        with self.assertRaisesRegex(evaluation_report.RunLoadError,
                                    r"split='test': the corpus of .*text_run has no file for it "
                                    r"\(it has \['train', 'valid'\]\)"):
            evaluation_report.evaluation_report(workdir, workdir / "evaluation_test", "test")
        self.assertEqual(snapshot(workdir), before)  # no evaluation_test/ either
        run = self.copy_run("eval_with_baseline")
        run_before = snapshot(run)
        with self.assertRaisesRegex(evaluation_report.RunLoadError,
                                    r"baseline_workdir=.*text_run has another vocabulary"):
            evaluation_report.evaluation_report(run, root / "report", "valid", max_tokens=50,
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
        with self.assertRaisesRegex(evaluation_report.RunLoadError, message):
            evaluation_report.load_trained_run(workdir)
        with self.assertRaisesRegex(run_setup.RunRefusedError, message):
            train_lib.run(tiny_config(), workdir, verbose=0)
        self.assertEqual(snapshot(workdir), before)
        self.assertTrue(checkpointing.check_vocabulary(self.base / "vocab.txt", self.base))


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
             r"flag --model_version=0: must be an integer >= 1"),
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
                            "initial_state", {"batch_size": np.array(1, np.int32)})
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
        state = self.client.predict("initial_state", {"batch_size": np.array(1, np.int32)})
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
        state = module.initial_state({"batch_size": tf.constant(1)})
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


if __name__ == "__main__":
    tf.test.main()
