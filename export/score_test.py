"""Tests of `psmm-score`: locally, over REST and over gRPC (local stand-ins for TF Serving)."""

import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

import numpy as np
import tensorflow as tf

from psmm_tf.export import score, testing
from psmm_tf.export.clients import GrpcClient, LocalClient, RestClient, ServingError

LINES = ["the cat sat on the mat", "", "a zebra saw the cat", "the cat ran to the zebra",
         "his dog was big and red", "it saw a bird in the tree"]


def run_cli(argv):
    """Runs `psmm-score`; returns (exit status, stdout)."""
    out = io.StringIO()
    return score.main(argv, out=out), out.getvalue()


def json_results(text):
    rows = [json.loads(line) for line in text.splitlines()]
    return rows[:-1], rows[-1]["total"]


class ScoreTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp()
        cls.base = os.path.dirname(testing.shared_export()[2])
        cls.input = os.path.join(cls.tmp, "input.txt")
        with open(cls.input, "w", encoding="utf-8") as f:
            f.write("\n".join(LINES) + "\n")
        cls.client = LocalClient(cls.base)
        # The reference: the whole file as one text through serving_default.
        cls.whole = cls.client.predict("serving_default", {"texts": ["\n".join(LINES)]})
        _, cls.local_json = run_cli(["--model", cls.base, "--input", cls.input,
                                     "--format", "json", "--lines_per_request", "2"])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def assert_matches_whole(self, output):
        lines, total = json_results(output)
        self.assertLen(lines, len(LINES))
        self.assertEqual([r["line"] for r in lines], list(range(1, len(LINES) + 1)))
        count = int(self.whole["num_tokens"][0])
        tokens = [t for r in lines for t in r["tokens"]]
        self.assertEqual(tokens, list(self.whole["tokens"][0][:count]))
        log_probs = [p for r in lines for p in r["log_probs"]]
        self.assertAllClose(log_probs, self.whole["log_probs"][0][:count], atol=1e-5)
        gate = [g for r in lines for g in r["gate"]]
        self.assertAllClose(gate, self.whole["gate"][0][:count], atol=1e-5)
        self.assertEqual(total["num_tokens"], count)
        self.assertAllClose(total["perplexity"], self.whole["perplexity"][0], rtol=1e-5)

    def test_local_document_in_chunks_equals_the_whole_text(self):
        self.assert_matches_whole(self.local_json)
        self.assertEqual(json_results(self.local_json)[0][1]["tokens"], ["<eos>"])  # blank line

    def test_text_format_and_stdin(self):
        stdin = io.TextIOWrapper(io.BytesIO(("\n".join(LINES[:3]) + "\n").encode()))
        with mock.patch.object(sys, "stdin", stdin):
            status, output = run_cli(["--model", self.base])
        self.assertEqual(status, 0)
        rows = output.splitlines()
        self.assertEqual(rows[0].split("\t")[0], "the")
        self.assertRegex(rows[7], r"^# line 1: perplexity [0-9.]+ \(7 tokens\)$")
        self.assertRegex(rows[-1], r"^# total: perplexity [0-9.]+ \(14 tokens, log-likelihood")
        first = [float(r.split("\t")[1]) for r in rows[:7]]
        self.assertAllClose(first, self.whole["log_probs"][0][:7], atol=1e-5)

    def test_a_line_holding_the_word_eos_is_one_line(self):
        # Lines were split at every <eos> token, the word's included, so
        # two lines were reported as lines 1, 2 and 3.
        path = os.path.join(self.tmp, "eos_word.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("the cat <eos> sat down\nsecond line\n")
        for extra in ([], ["--independent"]):
            with self.subTest(extra=extra):
                status, output = run_cli(["--model", self.base, "--input", path, "--format",
                                          "json", *extra])
                self.assertEqual(status, 0)
                lines, total = json_results(output)
                self.assertEqual([r["line"] for r in lines], [1, 2])
                self.assertEqual([r["num_tokens"] for r in lines], [6, 3])
                self.assertEqual(lines[0]["tokens"][2], "<eos>")
                self.assertEqual(total["num_tokens"], 9)

    def test_independent_lines(self):
        status, output = run_cli(["--model", self.base, "--input", self.input, "--format",
                                  "json", "--independent"])
        self.assertEqual(status, 0)
        lines, _ = json_results(output)
        alone = self.client.predict("serving_default", {"texts": [LINES[3]]})
        self.assertAllClose(lines[3]["perplexity"], alone["perplexity"][0], rtol=1e-5)
        # Not the same as in the document: the line's history is missing.
        in_document = json_results(self.local_json)[0][3]["perplexity"]
        self.assertNotAllClose(lines[3]["perplexity"], in_document, rtol=1e-3)

    def test_rest(self):
        with testing.RestServer(self.client) as server:
            status, output = run_cli(["--rest", server.url, "--model_name", "psmm", "--input",
                                      self.input, "--format", "json",
                                      "--lines_per_request", "2"])
            self.assertEqual(status, 0)
            self.assert_matches_whole(output)
            with self.assertRaisesRegex(ServingError, r"HTTP 400.*`token_ids` holds a token id"):
                RestClient(server.url, "psmm").predict(
                    "score", {"token_ids": [[2, 99]], "lengths": [2]})
            with self.assertRaisesRegex(ServingError, r"HTTP 404"):
                RestClient(server.url, "other").predict("serving_default", {"texts": ["a"]})

    def test_grpc(self):
        with testing.GrpcServer(self.client) as server:
            status, output = run_cli(["--grpc", server.target, "--input", self.input,
                                      "--format", "json", "--lines_per_request", "4"])
            self.assertEqual(status, 0)
            self.assert_matches_whole(output)
            client = GrpcClient(server.target, "psmm")
            with self.assertRaisesRegex(ServingError,
                                        r"INVALID_ARGUMENT.*`lengths` must be <= the time"):
                client.predict("score", {"token_ids": [[2, 3]], "lengths": [5]})
            client.close()

    def test_malformed_rest_replies_are_one_clear_error(self):
        def http_reply(body, status="200 OK", length=None):
            length = len(body) if length is None else length
            return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {length}\r\n\r\n").encode() + body

        scores = {"tokens": [["the", "<eos>"]], "log_probs": [[-1.0, -2.0]],
                  "gate": [[0.5, 0.5]], "num_tokens": [2]}
        replies = {
            "bad status line": (b"NONSENSE\r\n\r\n", "broke the HTTP exchange"),
            "cut short": (http_reply(b'{"outputs": {', length=500), "broke the HTTP exchange"),
            "nested too deep": (http_reply(b"[" * 300_000), "not JSON"),
            "no num_tokens": (http_reply(json.dumps({"outputs": {
                k: v for k, v in scores.items() if k != "num_tokens"}}).encode()),
                "not a psmm export's scores"),
            "no log_probs": (http_reply(json.dumps({"outputs": {
                k: v for k, v in scores.items() if k != "log_probs"}}).encode()),
                "not a psmm export's scores"),
            "ragged": (http_reply(b'{"outputs": {"log_probs": [[1, 2], [3]]}}'),
                       "not tensors"),
        }
        one_line = os.path.join(self.tmp, "one_line.txt")
        with open(one_line, "w") as f:
            f.write("the\n")
        for name, (raw, message) in replies.items():
            with self.subTest(reply=name), testing.RawHttpServer(raw) as server:
                with self.assertRaisesRegex(ServingError, message):
                    list(score.score_lib.score_independent(
                        RestClient(server.url, "psmm", timeout=10), ["the"]))
                out, err = io.StringIO(), io.StringIO()
                with mock.patch("sys.stderr", err):
                    status = score.main(["--rest", server.url, "--input", one_line,
                                         "--independent"], out=out)
                self.assertEqual(status, 1)
                self.assertIn(message, err.getvalue())
                self.assertNotIn("Traceback", err.getvalue())

    def test_a_request_over_the_exports_limit_names_lines_per_request(self):
        from psmm_tf.export.export_lib import export

        model, vocabulary_file, _ = testing.shared_export()
        base = os.path.join(self.tmp, "small_requests")
        export(model, vocabulary_file, base, max_tokens=64)
        text = os.path.join(self.tmp, "long_lines.txt")
        with open(text, "w") as f:
            f.write("".join(" ".join(["the cat sat"] * 6) + "\n" for _ in range(8)))
        for extra in ([], ["--independent"]):
            err = io.StringIO()
            with mock.patch("sys.stderr", err):
                status, _ = run_cli(["--model", base, "--input", text,
                                     "--lines_per_request", "8"] + extra)
            self.assertEqual(status, 1)
            self.assertIn("is too long: a request holds at most 64 tokens", err.getvalue())
            self.assertIn("a request held 8 lines", err.getvalue())
            self.assertIn("give a smaller --lines_per_request", err.getvalue())
            status, output = run_cli(["--model", base, "--input", text,
                                      "--lines_per_request", "2"] + extra)
            self.assertEqual(status, 0)

    def test_a_version_folder_without_an_export_is_named(self):
        base = os.path.join(self.tmp, "versions")
        shutil.copytree(os.path.dirname(testing.shared_export()[2]), base)
        (version,) = os.listdir(base)
        cases = [(os.path.join(base, str(int(version) + 1)), "folder"),
                 (os.path.join(base, str(int(version) + 2)), "file")]
        for path, kind in cases:
            os.mkdir(path) if kind == "folder" else open(path, "w").close()
            err = io.StringIO()
            with mock.patch("sys.stderr", err):
                status, _ = run_cli(["--model", base, "--input", self.input])
            self.assertEqual(status, 2)
            self.assertIn(f"{path} is not an export: no saved_model.pb in it", err.getvalue())
            self.assertIn(f"the complete versions are {version} (--model_version)",
                          err.getvalue())
            self.assertNotIn("Traceback", err.getvalue())
        status, _ = run_cli(["--model", base, "--model_version", version, "--input", self.input])
        self.assertEqual(status, 0)

    def test_errors_give_an_exit_status(self):
        empty = os.path.join(self.tmp, "empty.txt")
        open(empty, "w").close()
        self.assertEqual(run_cli(["--model", self.base, "--input", empty])[0], 2)
        self.assertEqual(run_cli(["--model", self.base, "--input", self.tmp + "/none"])[0], 2)
        with self.assertRaises(SystemExit):  # argparse: --model, --rest or --grpc is required
            run_cli(["--input", self.input])

    def test_perplexity_is_exp_of_mean_negative_log_prob(self):
        lines, total = json_results(self.local_json)
        log_probs = [p for r in lines for p in r["log_probs"]]
        self.assertAllClose(total["perplexity"], math.exp(-np.mean(log_probs)), rtol=1e-6)

    def test_cli_runs_without_psmm_tf(self):
        # A serving client needs TensorFlow only: the CLI must not import the training code, the
        # tf.data pipeline or TFDS. (`import psmm_tf` registers the Keras classes, so the
        # layers, models and the vocabulary are imported: Keras and NumPy, nothing more.)
        repo = os.path.dirname(os.path.dirname(os.path.abspath(score.__file__)))
        code = ("import sys; sys.modules.update(dict.fromkeys(['psmm_tf.training', "
                "'psmm_tf.data.pipeline', 'psmm_tf.data.tfds_builders', "
                "'tensorflow_datasets'])); "
                "from psmm_tf.export import score; "
                f"sys.exit(score.main(['--model', {self.base!r}, '--input', {self.input!r}, "
                "'--format', 'json']))")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=180, cwd=repo,
                                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assert_matches_whole(result.stdout)
