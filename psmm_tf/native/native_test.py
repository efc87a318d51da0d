"""The native kernels' switch and loader (issues 47 and 50): one switch ("auto", "on", "off"),
a build two processes can start at once, a cache that never crashes a run.

The loader's cases build with a fake compiler (a script that copies bytes to `-o` and logs its
calls) and a stand-in for `tf.load_op_library`, in temporary cache folders: seconds, no C++.
One case loads the real library, cut in its cache, in a fresh process (it needs g++).
"""

import contextlib
import dataclasses
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import types
import unittest
from unittest import mock

import tensorflow as tf

from psmm_tf import configs, native, testing
from psmm_tf.native import build

FAKE_COMPILER = """#!{python}
import os, pathlib, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    print(os.environ.get("FAKE_VERSION", "fake-c++ 1.0"))
    sys.exit(0)
here = pathlib.Path(__file__).parent
with open(here / "calls", "a") as calls:
    calls.write("build\\n")
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
out = pathlib.Path(args[args.index("-o") + 1])
out.write_bytes(pathlib.Path(os.environ.get("FAKE_SOURCE", here / "library")).read_bytes())
with open(here / "calls", "a") as calls:
    calls.write("done\\n")
"""
LIBRARY_BYTES = b"\x7fELF a stand-in library " * 64


def _fake_library(names=build.EXPECTED_OPS):
    return types.SimpleNamespace(**{name: object() for name in names})


class LoaderTest(unittest.TestCase):
    def setUp(self):
        self.tmp = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.tmp)
        self.cache = self.tmp / "cache"
        tools = self.tmp / "tools"
        tools.mkdir()
        self.compiler = tools / "fake-c++"
        self.compiler.write_text(FAKE_COMPILER.format(python=sys.executable))
        self.compiler.chmod(self.compiler.stat().st_mode | stat.S_IEXEC)
        (tools / "library").write_bytes(LIBRARY_BYTES)
        self.calls = tools / "calls"
        self.loaded = []
        self.ops = build.EXPECTED_OPS

        def load_op_library(path):
            self.loaded.append(path)
            return _fake_library(self.ops)

        patcher = mock.patch.object(tf, "load_op_library", load_op_library)
        patcher.start()
        self.addCleanup(patcher.stop)

    def builds(self):
        return self.calls.read_text().count("build") if self.calls.exists() else 0

    def load(self, **kwargs):
        return build.load(str(self.cache), str(self.compiler), **kwargs)

    def test_builds_once_logs_its_time_and_checks_its_sidecar(self):
        with self.assertLogs("psmm_tf", "WARNING") as logs:
            self.load()
        self.assertRegex("\n".join(logs.output), r"building psmm_tf native kernels into .* took "
                                                 r"\d+ s")
        (target,) = self.cache.glob("psmm_tf_kernels-*.so")
        self.assertEqual(build._sidecar(target).read_text().strip(), build.file_sha256(target))
        self.load()
        self.assertEqual(self.builds(), 1)
        self.assertEqual(self.loaded, [str(target)] * 2)

    def test_a_cut_or_flipped_library_is_rebuilt_naming_it(self):
        self.load()
        (target,) = self.cache.glob("psmm_tf_kernels-*.so")
        for damage in ("cut", "flipped", "no sidecar"):
            with self.subTest(damage=damage):
                data = target.read_bytes()
                if damage == "cut":
                    target.write_bytes(data[: len(data) // 2])
                elif damage == "flipped":
                    target.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
                else:
                    build._sidecar(target).unlink()
                with self.assertLogs("psmm_tf", "WARNING") as logs:
                    self.load()
                self.assertIn(f"the cached library {target} is damaged", logs.output[0])
                self.assertEqual(target.read_bytes(), LIBRARY_BYTES)
        self.assertEqual(self.builds(), 4)

    def test_a_library_without_every_op_is_refused_naming_it_and_removed(self):
        self.ops = build.EXPECTED_OPS[:3]  # built from some of the sources
        with self.assertRaisesRegex(build.Unavailable, r"psmm_tf_kernels-.*\.so lacks the "
                                                        r"op\(s\) psmm_pack_kernel"):
            self.load()
        self.assertEqual(list(self.cache.glob("psmm_tf_kernels-*.so")), [])

    def test_a_library_that_does_not_load_is_refused_naming_it(self):
        def broken(path):
            raise tf.errors.NotFoundError(None, None, f"{path}: undefined symbol")

        with mock.patch.object(tf, "load_op_library", broken):
            with self.assertRaisesRegex(build.Unavailable, r"psmm_tf_kernels-.*\.so does not "
                                                            r"load: .*undefined symbol"):
                self.load()

    def test_old_builds_are_removed_after_a_build_and_the_key_has_the_compiler_version(self):
        self.cache.mkdir()
        old = self.cache / "psmm_tf_kernels-0123456789abcdef.so"
        old.write_bytes(b"old")
        build._sidecar(old).write_text("x\n")
        unrelated = self.cache / "notes.txt"
        unrelated.write_text("mine")
        (self.cache / "psmm_tf_kernels-tmp-killed").mkdir()  # a builder killed midway
        self.load()
        (first,) = self.cache.glob("psmm_tf_kernels-*.so")
        self.assertNotEqual(first, old)
        self.assertFalse(build._sidecar(old).exists())
        self.assertFalse((self.cache / "psmm_tf_kernels-tmp-killed").exists())
        self.assertEqual(unrelated.read_text(), "mine")
        with mock.patch.dict(os.environ, {"FAKE_VERSION": "fake-c++ 2.0"}):
            self.load()
        (second,) = self.cache.glob("psmm_tf_kernels-*.so")
        self.assertNotEqual(first, second)

    def test_the_library_is_one_compiler_process_over_the_unit_of_every_source(self):
        self.load()
        self.assertEqual(self.calls.read_text().split(), ["build", "done"])
        included = re.findall(r'^#include "(.*)"$', build.UNIT.read_text(), re.MULTILINE)
        self.assertEqual(included, [source.name for source in build.SOURCES])

    def test_two_builders_with_an_empty_cache_build_once(self):
        errors = []

        def load():
            try:
                self.load()
            except Exception as error:  # noqa: BLE001 (reported below)
                errors.append(error)

        with mock.patch.dict(os.environ, {"FAKE_SLEEP": "1"}):
            threads = [threading.Thread(target=load) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        self.assertEqual(errors, [])
        self.assertEqual(self.builds(), 1)

    def test_a_hanging_compiler_is_stopped_and_leaves_no_temporary_folder(self):
        with mock.patch.dict(os.environ, {"FAKE_SLEEP": "60"}):
            with self.assertRaisesRegex(build.Unavailable, "took over 1 s; stopped"):
                self.load(timeout=1)
        self.assertEqual(sorted(p.name for p in self.cache.iterdir()),
                         ["psmm_tf_kernels-build.lock"])

    def test_odd_settings_name_the_setting_and_build_nothing_here(self):
        cases = [("", str(self.compiler), r"cache folder \(cache_dir.*got ''"),
                 ("relative/dir", str(self.compiler), r"absolute path .* got 'relative/dir'"),
                 (str(self.cache), "", r"compiler, psmm-train's \$CXX\) must be a command, "
                                       r"got ''"),
                 (str(self.cache), "/nonexistent/c++", r"compiler '/nonexistent/c\+\+'.* not "
                                                       r"found on the PATH"),
                 (str(self.cache), "/bin/true", r"compiler '/bin/true'.* exited 0 but wrote "
                                                r"no library")]
        cwd = self.tmp / "cwd"
        cwd.mkdir()
        previous = os.getcwd()
        os.chdir(cwd)
        try:
            for cache_dir, compiler, message in cases:
                with self.subTest(cache_dir=cache_dir, compiler=compiler):
                    with self.assertRaisesRegex(build.Unavailable, message):
                        build.load(cache_dir, compiler)
        finally:
            os.chdir(previous)
        self.assertEqual(list(cwd.iterdir()), [])
        self.assertEqual(build.check_cache_dir("~/x"), pathlib.Path.home() / "x")


@contextlib.contextmanager
def _enabled(mode, jit_compile=False):
    """`native.enabled()` with the switch at `mode`, set back afterwards."""
    previous = native.configure(mode=mode)
    try:
        with native.enabled(jit_compile=jit_compile):
            yield
    finally:
        native.configure(mode=previous.mode)


class SwitchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp)
        old = native.configure(cache_dir=self.tmp, compiler="/nonexistent/c++")
        self.addCleanup(native.configure, **dataclasses.asdict(old))
        native._logged.clear()

    def test_modes_are_checked_where_they_are_given(self):
        with self.assertRaisesRegex(ValueError, r"mode must be one of \('auto', 'on', 'off'\), "
                                                r"got 'yes'"):
            native.configure(mode="yes")
        with self.assertRaisesRegex(ValueError, "native must be one of .* got ''"):
            configs.TrainConfig(native="")
        with self.assertRaisesRegex(ValueError, "compiler must be a string, got 3"):
            native.configure(compiler=3)
        self.assertEqual(native.settings().compiler, "/nonexistent/c++")

    def test_a_config_written_before_the_switch_loads_with_auto(self):
        config = configs.get_preset("tiny")
        fields = configs.json.loads(config.to_json())
        del fields["train"]["native"]
        loaded = configs.ExperimentConfig.from_json(configs.json.dumps(fields))
        self.assertEqual(loaded.train.native, "auto")
        self.assertEqual(loaded, config)

    def test_auto_falls_back_with_one_line_on_fails_naming_the_compiler_off_builds_nothing(self):
        with self.assertLogs("psmm_tf", "WARNING") as logs:
            for _ in range(3):
                with _enabled("auto"):
                    self.assertIsNone(native.library_for("zoneout_cell"))
                    self.assertIsNone(native.library_for("target_log_softmax", tf.float32))
        self.assertEqual(len(logs.output), 1)
        self.assertIn("'/nonexistent/c++'", logs.output[0])
        with _enabled("on"), self.assertRaisesRegex(
                native.NativeKernelsUnavailable, r"native='on' .* compiler '/nonexistent/c\+\+'"):
            native.library_for("zoneout_cell")
        with self.assertRaisesRegex(native.NativeKernelsUnavailable, "not found on the PATH"):
            native.check("on")
        with _enabled("off"):
            self.assertIsNone(native.library_for("zoneout_cell"))
        self.assertEqual(os.listdir(self.tmp), [])

    def test_psmm_train_with_on_where_they_cannot_build_writes_nothing(self):
        from psmm_tf.training import run_setup, train_lib

        workdir = pathlib.Path(self.tmp) / "run"
        config = configs.get_preset("tiny").replace(train={"native": "on"})
        with self.assertRaisesRegex(run_setup.RunRefusedError, r"native='on' .*not found on "
                                                               r"the PATH"):
            train_lib.run(config, workdir)
        self.assertFalse(workdir.exists())
        # The run set the switch while it ran, and set it back.
        self.assertEqual(native.settings().mode, "auto")

    def test_an_xla_step_never_gets_the_kernels_and_on_says_so(self):
        with _enabled("on", jit_compile=True), self.assertRaisesRegex(
                native.NativeKernelsUnavailable, r"XLA-compiled \(jit_compile\)"):
            native.library_for("sgd_update")
        with _enabled("auto"), _enabled("auto", jit_compile=True):
            self.assertIsNone(native.library_for("sgd_update"))

    def test_outside_the_steps_and_for_other_dtypes_and_cpus_no_kernel(self):
        # No build is tried: these are decided before the library.
        self.assertIsNone(native.library_for("zoneout_cell"))
        with _enabled("on"):
            self.assertIsNone(native.library_for("target_log_softmax", tf.float64))
            self.assertIsNone(native.library_for("recurrent_product", tf.float16))
            with native.only("zoneout_keep"):
                self.assertIsNone(native.library_for("zoneout_cell"))
            with native.disabled():
                self.assertIsNone(native.library_for("zoneout_cell"))
        with self.assertRaisesRegex(ValueError, "unknown native kernel 'cell'"):
            native.library_for("cell")


@testing.skip_unless_tensorflow("the native kernels")
class DamagedCacheRunTest(unittest.TestCase):
    def test_a_cut_cached_library_is_rebuilt_and_the_process_finishes(self):
        # The real library, cut in half in a fresh cache: a new process rebuilds it (the
        # compiler here copies the intact build) and runs a training step's kernels.
        testing.native_library(self)
        (good,) = testing.NATIVE_TEST_CACHE.glob("psmm_tf_kernels-*.so")
        tmp = pathlib.Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, tmp)
        compiler = tmp / "fake-c++"
        compiler.write_text(FAKE_COMPILER.format(python=sys.executable))
        compiler.chmod(compiler.stat().st_mode | stat.S_IEXEC)
        script = textwrap.dedent(f"""
            import logging
            logging.basicConfig(format="%(message)s")
            from psmm_tf import native
            native.configure(mode="on", cache_dir={str(tmp / 'cache')!r},
                             compiler={str(compiler)!r})
            """)
        # A first process builds the library into the fresh cache; it is then cut.
        env = testing.child_env({"FAKE_SOURCE": str(good)})
        first = subprocess.run(
            [sys.executable, "-c", script + "print(native.check('on') is not None)"],
            env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(first.stdout.strip(), "True", first.stderr[-2000:])
        (built,) = (tmp / "cache").glob("psmm_tf_kernels-*.so")
        built.write_bytes(built.read_bytes()[: built.stat().st_size // 2])
        second = subprocess.run(
            [sys.executable, "-c", script + textwrap.dedent("""
                import tensorflow as tf
                from psmm_tf.layers.target_log_softmax_tf import target_log_softmax
                with native.enabled():
                    value = tf.function(target_log_softmax)(tf.zeros((2, 4)), tf.constant([0, 3]))
                print(round(float(tf.reduce_sum(value)), 4))
                """)], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(second.returncode, 0, second.stderr[-2000:])
        self.assertIn(f"the cached library {built} is damaged", second.stderr)
        self.assertEqual(second.stdout.strip(), "-2.7726")


if __name__ == "__main__":
    unittest.main()
