"""The built wheel: only the psmm_tf package, no tests, a license, the four console scripts.

Builds the wheel from a copy of the sources (nothing is written into the repository) with
`pip wheel --no-build-isolation`: no network, setuptools and wheel from this environment (the
`test` extra installs them).
"""

import email
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path

import psmm_tf
from psmm_tf.native import build as native_build

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("setup.py", "pyproject.toml", "README.md", "LICENSE", "psmm_tf", "trainers", "export")
CONSOLE_SCRIPTS = {
    "psmm-train": "psmm_tf.trainers.train:main",
    "psmm-evaluate": "psmm_tf.trainers.evaluate:main",
    "psmm-export": "psmm_tf.export.export_saved_model:main",
    "psmm-score": "psmm_tf.export.score:main",
}


def build_wheel(folder):
    """Builds the wheel of a copy of the sources in `folder`; returns its path."""
    source = Path(folder) / "source"
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif path.exists():
            source.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, source / name)
    out = Path(folder) / "dist"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"pip wheel failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    (wheel,) = out.glob("psmm_tf-*.whl")
    return wheel


class WheelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.wheel = build_wheel(cls.tmp)
        with zipfile.ZipFile(cls.wheel) as archive:
            cls.names = archive.namelist()
            cls.dist_info = next(n.split("/")[0] for n in cls.names
                                 if n.split("/")[0].endswith(".dist-info"))
            cls.metadata = email.message_from_bytes(
                archive.read(f"{cls.dist_info}/METADATA"))
            cls.entry_points = archive.read(f"{cls.dist_info}/entry_points.txt").decode()
            cls.top_level = archive.read(f"{cls.dist_info}/top_level.txt").decode().split()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_only_the_psmm_tf_package(self):
        outside = [n for n in self.names
                   if not n.startswith(("psmm_tf/", f"{self.dist_info}/"))]
        self.assertEqual(outside, [])
        self.assertEqual(self.top_level, ["psmm_tf"])
        for package in ("psmm_tf", "psmm_tf/trainers", "psmm_tf/export", "psmm_tf/models",
                        "psmm_tf/evaluation"):
            self.assertIn(f"{package}/__init__.py", self.names)
        for module in ("psmm_tf/trainers/train.py", "psmm_tf/trainers/evaluate.py",
                       "psmm_tf/export/export_saved_model.py", "psmm_tf/export/score.py",
                       "psmm_tf/cli.py"):
            self.assertIn(module, self.names)
        # Data files read at run time: the serving examples, the corpora's checksums and the
        # native kernels' sources.
        sources = [f"psmm_tf/native/{path.name}" for path in native_build.BUILD_FILES]
        self.assertIn("psmm_tf/native/target_log_softmax.cc", sources)
        for data in ["psmm_tf/export/models.config", "psmm_tf/data/checksums.tsv"] + sources:
            self.assertIn(data, self.names)

    def test_no_tests_in_the_wheel(self):
        self.assertEqual([n for n in self.names if n.endswith("_test.py")], [])
        self.assertEqual([n for n in self.names if n.endswith("/testing.py")], [])

    def test_license_and_metadata(self):
        licenses = [n for n in self.names
                    if n.startswith(f"{self.dist_info}/") and "LICENSE" in n]
        self.assertTrue(licenses, self.names)
        self.assertEqual(re.sub(r"[-_.]+", "-", self.metadata["Name"]).lower(), "psmm-tf")
        self.assertEqual(self.metadata["Version"], psmm_tf.__version__)
        self.assertIn("License :: OSI Approved :: Apache Software License",
                      self.metadata.get_all("Classifier"))
        self.assertTrue(self.metadata.get_all("Project-URL"))

    def test_dependency_bounds_keep_tensorflow_in_range(self):
        requires = self.metadata.get_all("Requires-Dist")
        by_name = {re.split(r"[<>=!~; ]", r, maxsplit=1)[0].lower(): r for r in requires}
        for name in ("tensorflow", "tensorflow-serving-api"):
            self.assertRegex(by_name[name], r"<\d", f"{name} needs an upper bound")
            self.assertRegex(by_name[name], r">=2\.20")  # keras-hub 0.32: tensorflow-text 2.20+
        self.assertIn('matplotlib; extra == "plots"', requires)
        self.assertNotIn("matplotlib", [r.split(";")[0] for r in requires if ";" not in r])

    def test_console_scripts(self):
        for script, target in CONSOLE_SCRIPTS.items():
            self.assertRegex(self.entry_points, rf"{script} = {re.escape(target)}\n")


if __name__ == "__main__":
    unittest.main()
