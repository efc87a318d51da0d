"""Hostile inputs (docs/hostile_inputs.md, "psmm-score and its REST client"): psmm-score and its
REST client: deadlines, unreachable or foreign servers, bad options. Each is refused with a message
naming it, and nothing a user has is touched (every pre-existing file byte-identical afterwards)."""

import contextlib
import gzip
import http.server
import io
import json
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from unittest import mock

import numpy as np
import tensorflow as tf

from psmm_tf.export import score, testing
from psmm_tf.export.clients import RestClient, ServingError
from psmm_tf.export.serving_module import DEFAULT_MAX_TOKENS
from psmm_tf.testing import (
    snapshot,
    start_script,
    truncate,
)


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


class _Hang(http.server.BaseHTTPRequestHandler):
    """Takes the request, tells the test, and answers nothing until the test ends."""

    def do_POST(self):  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.arrived.set()
        self.server.stop.wait(120)

    def log_message(self, *args):
        pass


class InterruptTest(tf.test.TestCase):
    def test_ctrl_c_while_a_request_waits_is_one_line_and_exit_130(self):
        # Ctrl-C in psmm-score was a KeyboardInterrupt traceback.
        server = http.server.HTTPServer(("127.0.0.1", 0), _Hang)
        server.arrived, server.stop = threading.Event(), threading.Event()
        thread = threading.Thread(target=server.handle_request, daemon=True)
        thread.start()
        text = Path(self.get_temp_dir()) / "text.txt"
        text.write_text("the cat sat\n")
        child = start_script("export/score.py", [
            f"--rest=http://127.0.0.1:{server.server_address[1]}", "--timeout=100",
            f"--input={text}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertTrue(server.arrived.wait(240), "psmm-score sent no request")
            child.send_signal(signal.SIGINT)
            _, stderr = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
            server.stop.set()
            thread.join(10)
            server.server_close()
        self.assertEqual(child.returncode, 130, stderr)
        self.assertNotIn("Traceback", stderr)
        self.assertNotIn("KeyboardInterrupt", stderr)
        self.assertIn("psmm-score: interrupted (Ctrl-C)", stderr)


class RestDeadlineTest(tf.test.TestCase):
    def test_timeout_is_a_deadline_for_the_whole_answer(self):
        # --timeout=2 against a 1 byte/s server ran 41.8 s.
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
        # /dev/zero as --input was read without end (no newline ever comes), and a
        # cut saved_model.pb was a traceback.
        endless = root / "endless_line.txt"
        with open(endless, "wb") as f:
            f.write(b"the cat\n" + b"\0" * (score.score_lib.MAX_LINE_BYTES + 1))
        cut_export = root / "cut_export"
        shutil.copytree(Path(export_dir).parent, cut_export)
        truncate(cut_export / "1" / "saved_model.pb", 5000)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            closed = sock.getsockname()[1]
        for argv, status, message in [
            (["--rest=localhost:8501"], 2, r"--rest=localhost:8501: 'localhost:8501' is not an "
                                           r"http\(s\) URL with a host"),
            (["--rest=http://[::1"], 2, r"--rest=http://\[::1: .* is not a URL \(Invalid IPv6"),
            (["--rest=http://127.0.0.1:99999"], 2, r"is not a URL \(Port out of range"),
            ([f"--rest=http://127.0.0.1:{closed}", "--timeout=0"], 2,
             r"flag --timeout=0.0: must be a number of seconds in \(0, 86400\]"),
            # Past the clock's range: an OverflowError traceback from the socket's deadline.
            ([f"--rest=http://127.0.0.1:{closed}", "--timeout=1e10"], 2,
             r"flag --timeout=10000000000.0: must be a number of seconds in \(0, 86400\]"),
            # Empty: fell through to the gRPC client, an AttributeError traceback.
            (["--model="], 2, r"flag --model=: is empty: expected an export folder"),
            (["--rest="], 2, r"flag --rest=: is empty"),
            # Read by a server client only: ignored with --model, as if they had been used.
            ([f"--model={export_dir}", "--model_name=other"], 2,
             r"--model_name and --timeout are for a server \(--rest, --grpc\)"),
            ([f"--model={export_dir}", "--timeout=5"], 2, r"--model_name and --timeout are"),
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

    def test_a_failed_write_is_not_called_a_failed_read_and_a_closed_pipe_is_quiet(self):
        export_dir = testing.shared_export()[2]
        text = Path(self.get_temp_dir()) / "lines.txt"
        # Scores of ~200 KB: more than a pipe holds, so writes go on after `head` has exited.
        text.write_text("the cat sat\n" * 1500)
        # Both were "cannot read lines.txt: [Errno 28] No space left on device" (or "Broken
        # pipe"), status 2. Stdout is /dev/full, as `psmm-score ... > /dev/full` has it.
        full = open("/dev/full", "w")  # noqa: SIM115 (closing it flushes: fails again)
        err = io.StringIO()
        try:
            with contextlib.redirect_stdout(full), contextlib.redirect_stderr(err):
                code = score.main([f"--model={export_dir}", f"--input={text}"])
        finally:
            with contextlib.suppress(OSError):
                full.close()
        self.assertEqual(code, 1)
        self.assertEqual(err.getvalue(), "psmm-score: cannot write the scores to stdout: No space "
                                         "left on device\n")
        command = shlex.join([sys.executable, "-m", "psmm_tf.export.score",
                              f"--model={export_dir}", f"--input={text}"])
        done = subprocess.run(f"{command} | head -n 2; echo status ${{PIPESTATUS[0]}}",
                              shell=True, executable="/bin/bash", capture_output=True,
                              text=True, timeout=300)
        lines = done.stdout.splitlines()
        self.assertEqual(len(lines), 3, done)
        self.assertTrue(lines[0].startswith("the\t"), lines)
        self.assertEqual(lines[2], f"status {score.score_lib.SIGPIPE_STATUS}")
        self.assertNotIn("Broken pipe", done.stderr)
        self.assertNotIn("Traceback", done.stderr)

    def test_input_files_are_read_by_the_corpus_readers_rules(self):
        # --input was decoded as plain UTF-8: a byte order mark made the first
        # word `\ufeffthe`, scored as <unk>; UTF-16, NUL bytes and \r-alone line ends were
        # scored as text or refused cryptically, and a .gz file was "not valid UTF-8".
        root = Path(self.get_temp_dir()) / "encodings"
        root.mkdir(exist_ok=True)
        text = "the cat sat on the mat\nthe dog ran\n"
        files = {"plain.txt": text.encode(), "bom.txt": b"\xef\xbb\xbf" + text.encode(),
                 "crlf.txt": b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode(),
                 "text.txt.gz": gzip.compress(b"\xef\xbb\xbf" + text.encode()),
                 "utf16.txt": text.encode("utf-16"), "utf16le.txt": text.encode("utf-16-le"),
                 "nul.txt": b"the cat\x00 sat\n", "mac.txt": text.replace("\n", "\r").encode(),
                 "joined.txt": (text + "\ufeff" + text).encode(),
                 "not_gzip.txt.gz": text.encode()}
        for name, data in files.items():
            (root / name).write_bytes(data)
        export_dir = testing.shared_export()[2]
        before = snapshot(root), snapshot(Path(export_dir).parent)

        def scored(source, stdin=None):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stderr(err), mock.patch.object(
                    sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin or b""))):
                code = score.main([f"--model={export_dir}", f"--input={source}",
                                   "--format=json"], out=out)
            return code, [json.loads(row) for row in out.getvalue().splitlines()], err.getvalue()

        code, plain, stderr = scored(root / "plain.txt")
        self.assertEqual(code, 0, stderr)
        self.assertEqual(plain[0]["tokens"][:2], ["the", "cat"])
        for source, stdin in [(root / "bom.txt", None), (root / "crlf.txt", None),
                              (root / "text.txt.gz", None), ("-", files["crlf.txt"])]:
            with self.subTest(input=Path(source).name, stdin=stdin is not None):
                code, rows, stderr = scored(source, stdin)
                self.assertEqual(code, 0, stderr)
                self.assertEqual(rows[0]["tokens"][0], "the")  # not <unk>
                self.assertEqual(rows, plain)
        for name, message in [
            ("utf16.txt", rf"cannot read {root}/utf16.txt: {root}/utf16.txt starts with a "
                          rf"UTF-16 byte order mark: a UTF-16 text file; expected UTF-8"),
            ("utf16le.txt", r"cannot read .*utf16le.txt: line 1 holds a NUL character \(at "
                            r"character 1\): a binary file, or UTF-16 text; expected a UTF-8"),
            ("nul.txt", r"cannot read .*nul.txt: line 1 holds a NUL character \(at character "
                        r"7\)"),
            ("mac.txt", r"cannot read .*mac.txt: its lines end in a carriage return \(\\r\) "
                        r"alone \(classic Mac OS line ends\)"),
            ("joined.txt", r"cannot read .*joined.txt: line 3 holds a byte order mark "
                           r"\(U\+FEFF\) at character 0"),
            ("not_gzip.txt.gz", r"cannot read .*not_gzip.txt.gz: not a readable gzip file "
                                r"after line 0 \(Not a gzipped file"),
        ]:
            with self.subTest(input=name):
                code, rows, stderr = scored(root / name)
                self.assertEqual(code, 2, stderr)
                self.assertRegex(stderr, "^psmm-score: " + message)
                self.assertEqual(rows, [])
        code, _, stderr = scored("-", files["utf16.txt"])
        self.assertEqual(code, 2)
        self.assertRegex(stderr, r"cannot read -: - starts with a UTF-16 byte order mark")
        self.assertEqual((snapshot(root), snapshot(Path(export_dir).parent)), before)

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


if __name__ == "__main__":
    tf.test.main()
