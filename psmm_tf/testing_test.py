"""The test helpers: `made_once` makes a folder once for every process of a test run and makes
again one that a killed process left incomplete; a program child from the fork server exits and
prints as the program in a new interpreter does; a child on the JAX backend takes the tests'
JAX settings."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

from psmm_tf import testing


def _ask(root):
    """In a child of the fork server: asks for the folder "thing" under `root`; each `make`
    appends to calls.txt and sleeps, so a second `make` in either of two askers would be seen."""
    testing.SHARED_RUN_DIR = root
    calls = Path(root) / "calls.txt"

    def make(path):
        with open(calls, "a") as f:
            f.write("make\n")
        time.sleep(2)
        path.mkdir()
        (path / "made").write_text("yes")

    if (testing.made_once("thing", make) / "made").read_text() != "yes":
        sys.exit(3)


class TemporaryRootTestCase(unittest.TestCase):
    def setUp(self):
        self.root = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.root)


class MadeOnceTest(TemporaryRootTestCase):
    def test_two_processes_asking_at_once_make_it_once(self):
        # Two processes of the fork server the programs' children start from (psmm_tf and
        # its testing module imported once): separate processes, as pytest-xdist's workers are.
        askers = [testing._program_context().Process(target=_ask, args=(str(self.root),))
                  for _ in range(2)]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join(300)
            self.assertEqual(asker.exitcode, 0)
        self.assertEqual((self.root / "calls.txt").read_text(), "make\n")

    def test_a_folder_left_incomplete_is_made_again(self):
        (self.root / "thing").mkdir()
        (self.root / "thing" / "half").write_text("left by a killed process")
        made = []

        def make(path):
            made.append(path)
            path.mkdir()
            (path / "whole").write_text("")

        with mock.patch.object(testing, "SHARED_RUN_DIR", str(self.root)):
            path = testing.made_once("thing", make)
            self.assertEqual(testing.made_once("thing", make), path)
        self.assertEqual(made, [self.root / "thing"])
        self.assertEqual(sorted(p.name for p in path.iterdir()), ["whole"])


class ForkedProgramTest(TemporaryRootTestCase):
    def test_a_forked_program_exits_and_prints_as_a_new_interpreter_does(self):
        args = ["--workdir=/nonexistent/psmm_run", "--max_tokens=10"]
        self.assertTrue(testing._forked("trainers/evaluate.py", None))
        forked = testing.run_script("trainers/evaluate.py", args)
        new = subprocess.run([sys.executable, str(testing.REPO_ROOT / "trainers/evaluate.py"),
                              *args], cwd=testing.REPO_ROOT, env=testing.child_env(),
                             capture_output=True, text=True, timeout=240)
        self.assertEqual(new.returncode, 1, new.stderr[-2000:])
        self.assertEqual((forked.returncode, forked.stdout), (new.returncode, new.stdout))
        self.assertEqual(forked.stderr.splitlines()[-1], new.stderr.splitlines()[-1])
        self.assertIn("/nonexistent/psmm_run", forked.stderr)

    def test_a_killed_program_reports_the_signal_as_popen_does(self):
        # An import-time variable (KERAS_BACKEND) makes a new interpreter; TF_CONFIG does not.
        self.assertFalse(testing._forked("trainers/train.py", {"KERAS_BACKEND": "jax"}))
        self.assertTrue(testing._forked("trainers/train.py", {"TF_CONFIG": ""}))
        child = testing.start_script("trainers/train.py", ["--preset=tiny", "--dataset=synthetic",
                                     f"--workdir={self.root / 'run'}", "--epochs=1000"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.assertIsInstance(child, testing.ForkedProgram)
        self.assertIsNone(child.poll())
        child.send_signal(signal.SIGKILL)
        self.assertEqual(child.wait(timeout=60), -signal.SIGKILL)
        stdout, stderr = child.communicate()
        self.assertEqual((stdout, type(stderr)), (None, bytes))


class ChildEnvTest(TemporaryRootTestCase):
    def test_a_jax_child_takes_the_tests_jax_settings_and_no_other_child_does(self):
        with mock.patch.object(testing, "SHARED_RUN_DIR", str(self.root)):
            jax_env = testing.child_env({"KERAS_BACKEND": "jax"})
            tensorflow_env = testing.child_env({"KERAS_BACKEND": "tensorflow"})
            chosen = testing.child_env({"KERAS_BACKEND": "jax",
                                        "JAX_DISABLE_MOST_OPTIMIZATIONS": "false"})
        self.assertEqual(jax_env["JAX_DISABLE_MOST_OPTIMIZATIONS"], "true")
        self.assertEqual(jax_env["JAX_COMPILATION_CACHE_DIR"],
                         str(self.root / "jax_compilation_cache"))
        self.assertEqual(jax_env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"], "0")
        self.assertFalse([name for name in tensorflow_env if name.startswith("JAX_")
                          and name not in os.environ])
        self.assertEqual(chosen["JAX_DISABLE_MOST_OPTIMIZATIONS"], "false")  # a test's own
        # JAX reads each as the option of its name.
        out = subprocess.run(
            [sys.executable, "-c", "import jax, json; print(json.dumps({k: jax.config.values[k] "
             f"for k in {sorted(testing.jax_test_settings())!r}}}))"],
            env=jax_env, capture_output=True, text=True, check=True).stdout
        with mock.patch.object(testing, "SHARED_RUN_DIR", str(self.root)):
            self.assertEqual(json.loads(out.strip().splitlines()[-1]),
                             testing.jax_test_settings())


if __name__ == "__main__":
    unittest.main()
