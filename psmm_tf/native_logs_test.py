"""The command lines' filter of TensorFlow's C++ log lines: what it drops, what it keeps, when."""

import subprocess
import sys
import textwrap
import unittest

from psmm_tf import native_logs
from psmm_tf.testing import child_env

NATIVE = [
    b"I0000 00:00:1795570501.622537   14537 port.cc:153] oneDNN custom operations are on.",
    b"E0000 00:00:1795569535.317161   10889 cuda_platform.cc:52] failed call to cuInit: X",
    b"W0000 00:00:1795569759.541704   11431 op_kernel.cc:1858] OP_REQUIRES failed at x",
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    b"To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild",
]
KEPT = [
    b"FATAL psmm-train: out of disk space (/w/model.keras: No space left on device).",
    b"I1125 01:37:23.828767 139951740287872 train_lib.py:92] psmm: 1 replica(s)",  # absl-py
    b"F0000 00:00:1795570501.622537   14537 check.cc:1] Check failed: a fatal C++ error",
    b"Traceback (most recent call last):",
    b"psmm-score: --model=EXP: EXP/1 cannot be loaded as a SavedModel",
]


class NativeLogFilterTest(unittest.TestCase):
    def test_the_pre_initialisation_lines_are_dropped_and_nothing_else(self):
        for line in NATIVE:
            self.assertTrue(native_logs.is_native_log_line(line), line)
        for line in KEPT:
            self.assertFalse(native_logs.is_native_log_line(line), line)

    def test_only_the_programs_without_a_user_setting_get_it(self):
        self.assertTrue(native_logs.wanted_for("/venv/bin/psmm-train", {}))
        self.assertTrue(native_logs.wanted_for("psmm-score", {"HOME": "/root"}))
        self.assertFalse(native_logs.wanted_for("/venv/bin/psmm-train",
                                                {"TF_CPP_MIN_LOG_LEVEL": "0"}))
        self.assertFalse(native_logs.wanted_for("/usr/bin/python", {}))
        self.assertFalse(native_logs.wanted_for("", {}))

    def run_as(self, program, code, user_level=None):
        env = child_env()
        env.pop("TF_CPP_MIN_LOG_LEVEL", None)
        if user_level is not None:
            env["TF_CPP_MIN_LOG_LEVEL"] = user_level
        source = f"import sys\nsys.argv[0] = {program!r}\n" + textwrap.dedent(code)
        return subprocess.run([sys.executable, "-c", source], env=env, capture_output=True,
                              timeout=120)

    def test_a_program_keeps_its_own_lines_in_order_on_the_real_fd_2(self):
        # C++ lines written straight to fd 2 (as Abseil writes them), between the program's own.
        code = f"""
            import os
            import psmm_tf
            for line in {NATIVE + KEPT!r}:
                os.write(2, line + b"\\n")
            sys.stderr.write("last, without a newline")
        """
        done = self.run_as("/venv/bin/psmm-evaluate", code)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stderr, b"\n".join(KEPT) + b"\nlast, without a newline")
        # A user's TF_CPP_MIN_LOG_LEVEL, or a Python program, gets every line as written.
        for program, level in (("/venv/bin/psmm-evaluate", "0"), ("my_script.py", None)):
            with self.subTest(program=program, level=level):
                done = self.run_as(program, code, level)
                self.assertTrue(done.stderr.endswith(
                    b"\n".join(NATIVE + KEPT) + b"\nlast, without a newline"), done.stderr)

    def test_tensorflows_own_import_lines_are_gone(self):
        done = self.run_as("/venv/bin/psmm-score", "import psmm_tf\nimport tensorflow as tf\n"
                                                    "print(tf.constant(2).numpy())\n")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout, b"2\n")
        for line in done.stderr.splitlines():
            self.assertFalse(native_logs.is_native_log_line(line), line)


if __name__ == "__main__":
    unittest.main()
