"""The loader of psmm_tf's native kernels: one library built from `SOURCES`, cached, checked.

`load(cache_dir, compiler)` returns the loaded op library or raises `Unavailable` with a
message naming what is missing (the compiler, TensorFlow's headers, a writable cache folder) or
which file was refused. The library is built against the installed TensorFlow with `compiler`
(one compiler process for `UNIT`, which includes every source) into `cache_dir`, under a file
lock (two processes with an empty cache build once), under a name whose key covers the sources,
this loader, TensorFlow's version, the CPU, the compiler's path and `--version` and the full
command line; the first build is logged with its time, and after it the package's other builds
in the folder are removed. A sidecar `.sha256` is written after the build and checked before
every load (a cut or changed library is rebuilt, with one line naming it), and a loaded library
must hold every op of `EXPECTED_OPS` (else it is removed and refused, naming it). Only
`psmm_tf.native` (the module that decides) calls this one; it reads no environment variable and
no setting of its own.
"""

import contextlib
import fcntl
import hashlib
import logging
import os
import pathlib
import platform
import shutil
import signal
import subprocess
import tempfile
import time

HERE = pathlib.Path(__file__).parent
SOURCES = tuple(HERE / name for name in ("zoneout_cell.cc", "zoneout_keep.cc",
                                         "recurrent_product.cc", "target_log_softmax.cc",
                                         "sgd_update.cc"))
HEADERS = (HERE / "kernel_util.h",)
# The one translation unit compiled: it includes SOURCES (TensorFlow's headers parsed once).
UNIT = HERE / "kernels.cc"
# Every file of the package a build reads (the cache key's; the wheel ships them).
BUILD_FILES = (UNIT, *SOURCES, *HEADERS)
# The Python names of the ops the library registers (`REGISTER_OP` in SOURCES).
EXPECTED_OPS = ("psmm_zoneout_cell", "psmm_zoneout_cell_grad", "psmm_zoneout_keep",
                "psmm_pack_kernel", "psmm_packed_product", "psmm_target_log_softmax",
                "psmm_target_log_softmax_grad", "psmm_squared_norm",
                "psmm_resource_scaled_subtract", "psmm_resource_scaled_subtract_rows")
PREFIX = "psmm_tf_kernels-"
# Seconds a build may take, all of it (minutes on a loaded 2-core machine).
BUILD_TIMEOUT_S = 900
CXX_FLAGS = ("-std=c++17", "-fPIC", "-O3", "-march=native", "-w")

_log = logging.getLogger("psmm_tf")


class Unavailable(RuntimeError):
    """The library cannot be built or loaded here; the message names why."""


def cpu_info_lines():
    """The lines of /proc/cpuinfo, or () where it cannot be read."""
    try:
        return tuple(pathlib.Path("/proc/cpuinfo").read_text().splitlines())
    except OSError:
        return ()


def _cpu_signature():
    """The CPU's model and instruction-set flags (the library is built with -march=native)."""
    keep = {line for line in cpu_info_lines() if line.startswith(("model name", "flags"))}
    return "\n".join(sorted(keep)) or platform.processor()


def check_cache_dir(cache_dir):
    """`cache_dir` as an absolute path (`~` expanded). Raises `Unavailable` naming it when it
    is empty, not a string or path, or relative (nothing is built into the current folder)."""
    if not isinstance(cache_dir, (str, os.PathLike)) or not str(cache_dir).strip():
        raise Unavailable(f"the native kernels' cache folder (cache_dir, psmm-train's "
                          f"$PSMM_TF_CACHE) must be a folder path, got {cache_dir!r}")
    path = pathlib.Path(cache_dir).expanduser()
    if not path.is_absolute():
        raise Unavailable(f"the native kernels' cache folder (cache_dir, psmm-train's "
                          f"$PSMM_TF_CACHE) must be an absolute path or start with ~, got "
                          f"{str(cache_dir)!r}")
    return path


def compiler_version(compiler):
    """The first lines of `compiler --version`. Raises `Unavailable` naming the compiler when
    it is empty, not on the PATH, or does not answer."""
    if not isinstance(compiler, str) or not compiler.strip():
        raise Unavailable(f"the native kernels' C++ compiler (compiler, psmm-train's $CXX) "
                          f"must be a command, got {compiler!r}")
    if shutil.which(compiler) is None:
        raise Unavailable(f"the native kernels' C++ compiler {compiler!r} (compiler, "
                          f"psmm-train's $CXX) is not found on the PATH")
    try:
        result = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                                timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise Unavailable(f"the native kernels' C++ compiler {compiler!r} (compiler, "
                          f"psmm-train's $CXX) does not answer --version: {error}") from None
    return (result.stdout or result.stderr).strip()[:2000]


def build_command(tf, compiler, output):
    """The command line that builds `UNIT` (so SOURCES) into the library `output` (a path)."""
    return [compiler, *CXX_FLAGS, "-shared", str(UNIT), "-o", str(output),
            *tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags()]


def cache_key(tf, compiler, version):
    """The hex key of a build: sources, headers, this loader, TensorFlow, CPU, compiler and
    its version, and the command line (with a fixed output name)."""
    parts = [path.read_text() for path in (*BUILD_FILES, pathlib.Path(__file__))]
    parts += [tf.__version__, _cpu_signature(), compiler, version,
              repr(build_command(tf, compiler, "OUT"))]
    return hashlib.sha256("\n\0".join(parts).encode()).hexdigest()


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sidecar(target):
    return target.with_name(target.name + ".sha256")


def _intact(target, repair=False):
    """Whether `target` exists and matches its sidecar sha256. With `repair` (under the lock)
    a damaged one (cut, changed, no sidecar) is logged, naming it, and removed."""
    if not target.exists():
        return False
    try:
        expected = _sidecar(target).read_text().strip()
        if expected == file_sha256(target):
            return True
        reason = "its sha256 differs from its .sha256 file"
    except OSError as error:
        reason = f"no readable .sha256 beside it ({error.strerror or error})"
    if not repair:
        return False
    _log.warning("psmm_tf native kernels: the cached library %s is damaged (%s); rebuilding it.",
                 target, reason)
    _remove(target)
    return False


def _remove(target):
    for path in (target, _sidecar(target)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def _locked(cache):
    """An exclusive `fcntl` lock on `cache/.lock` (released when the process ends)."""
    with open(cache / f"{PREFIX}build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run_compiler(command, timeout):
    """Runs `command` in its own process group; kills it after `timeout` seconds. Raises
    `Unavailable` on a timeout or a failure."""
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
    except OSError as error:
        raise Unavailable(f"the native kernels' C++ compiler {command[0]!r} (compiler, "
                          f"psmm-train's $CXX) cannot be run: {error}") from None
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"building the native kernels with {command[0]!r} took over "
                          f"{timeout} s; stopped") from None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    if process.returncode != 0:
        raise Unavailable(f"the native kernels' C++ compiler {command[0]!r} failed "
                          f"(exit {process.returncode}):\n{stderr[-2000:]}")


def _build(tf, compiler, target, timeout):
    """Builds UNIT (so SOURCES) into `target` (whole or not at all) and its sidecar sha256; then
    removes the package's other builds in the folder."""
    header = pathlib.Path(tf.sysconfig.get_include()) / "tensorflow/core/framework/op_kernel.h"
    if not header.exists():
        raise Unavailable(f"TensorFlow's C++ headers are missing: no {header}")
    _log.warning("building psmm_tf native kernels into %s with %s (first use; minutes) ...",
                 target, compiler)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f"{PREFIX}tmp-") as scratch:
        output = pathlib.Path(scratch) / target.name
        _run_compiler(build_command(tf, compiler, output), timeout)
        if not output.is_file() or output.stat().st_size == 0:
            raise Unavailable(f"the native kernels' C++ compiler {compiler!r} (compiler, "
                              f"psmm-train's $CXX) exited 0 but wrote no library")
        _sidecar(target).write_text(file_sha256(output) + "\n")
        os.replace(output, target)  # atomic: a reader sees all of it or none
    _log.warning("building psmm_tf native kernels into %s took %.0f s", target,
                 time.monotonic() - start)
    for old in target.parent.glob(f"{PREFIX}*.so"):
        if old != target:
            _remove(old)
    for scratch in target.parent.glob(f"{PREFIX}tmp-*"):  # of builders killed (we hold the lock)
        shutil.rmtree(scratch, ignore_errors=True)


def _check_ops(library, target):
    missing = [name for name in EXPECTED_OPS if not hasattr(library, name)]
    if missing:
        _remove(target)  # the next process builds it again
        raise Unavailable(f"the cached library {target} lacks the op(s) {', '.join(missing)} "
                          f"(built from other sources); removed, the next run rebuilds it")
    return library


def load(cache_dir, compiler, timeout=BUILD_TIMEOUT_S):
    """The loaded op library (`EXPECTED_OPS` its attributes), built first where needed.

    Args:
        cache_dir: str or path, absolute or starting with `~`: the folder of the builds.
        compiler: str, the C++ compiler command (a name on the PATH or a path).
        timeout: seconds a build may take.

    Raises:
        Unavailable: with a message naming the setting or the file at fault.
    """
    import tensorflow as tf

    cache = check_cache_dir(cache_dir)
    version = compiler_version(compiler)
    target = cache / f"{PREFIX}{cache_key(tf, compiler, version)[:16]}.so"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        if not _intact(target):
            with _locked(cache):
                if not _intact(target, repair=True):  # another process may have built it
                    _build(tf, compiler, target, timeout)
    except OSError as error:
        raise Unavailable(f"the native kernels' cache folder {str(cache)!r} (cache_dir, "
                          f"psmm-train's $PSMM_TF_CACHE) is not usable: {error}") from None
    try:
        library = tf.load_op_library(str(target))
    except (tf.errors.OpError, OSError) as error:
        raise Unavailable(f"the cached library {target} does not load: {error}") from None
    return _check_ops(library, target)
