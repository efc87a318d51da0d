"""The test helpers' shared folders: `made_once` makes a folder once for every process of a
test run and makes again one that a killed process left incomplete."""

import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path
from unittest import mock

from psmm_tf import testing

# Two processes ask at once for the same folder; each `make` appends to calls.txt and sleeps,
# so a second `make` in either process would be seen.
ASK = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from psmm_tf import testing
    testing.SHARED_RUN_DIR = sys.argv[1]
    calls = Path(sys.argv[1]) / "calls.txt"

    def make(path):
        with open(calls, "a") as f:
            f.write("make\\n")
        time.sleep(2)
        path.mkdir()
        (path / "made").write_text("yes")

    print((testing.made_once("thing", make) / "made").read_text())
    """)


class MadeOnceTest(unittest.TestCase):
    def setUp(self):
        self.root = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.root)

    def test_two_processes_asking_at_once_make_it_once(self):
        askers = [subprocess.Popen([sys.executable, "-c", ASK, str(self.root)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=testing.child_env())
                  for _ in range(2)]
        for asker in askers:
            stdout, stderr = asker.communicate(timeout=300)
            self.assertEqual((asker.returncode, stdout.strip()), (0, "yes"), stderr[-2000:])
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


if __name__ == "__main__":
    unittest.main()
