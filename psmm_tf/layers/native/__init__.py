"""Native TensorFlow kernels of psmm_tf, compiled on first use.

`zoneout_cell.cc` holds one step of the zoneout LSTM cell, forward and backward, as two CPU
kernels (`lstm_recurrence_tf` uses them). A graph that holds them runs only where their library
is loaded, which a SavedModel for TF Serving must not need: so the recurrence uses them only in
graphs traced inside `enabled()`, which the training steps open (psmm-train's `TrainStep`
around its compiled step, the tasks' `train_step` in Keras' `fit`); exports, `.keras` models,
`predict` and `evaluate` trace the same equations as TensorFlow ops. The library is built against the installed TensorFlow with the C++ compiler
on the path (`$CXX`, else `g++`), once per TensorFlow version, source and CPU, into
`$PSMM_TF_CACHE` (default `~/.cache/psmm_tf`). Where it cannot be built (no compiler, no
TensorFlow headers, no writable cache) or `PSMM_TF_NATIVE=0` is set, `zoneout_cell()` returns
None and the recurrence runs the same equations as TensorFlow ops.
"""

import contextlib
import functools
import hashlib
import logging
import os
import pathlib
import platform
import shlex
import subprocess
import tempfile

SOURCE = pathlib.Path(__file__).with_name("zoneout_cell.cc")

# Module-wide, not per thread: tf.distribute traces its replicas in threads of their own.
_depth = {"enabled": 0, "disabled": 0}


@contextlib.contextmanager
def _scope(kind):
    _depth[kind] += 1
    try:
        yield
    finally:
        _depth[kind] -= 1


def enabled():
    """Within it, graphs traced may hold the native cell (where it can be built and run)."""
    return _scope("enabled")


def disabled():
    """Within it, graphs traced hold no native cell, also inside `enabled()` (to compare)."""
    return _scope("disabled")


def is_enabled():
    """Whether a graph traced now may hold the native cell: inside `enabled()`, outside
    `disabled()`."""
    return _depth["enabled"] > 0 and _depth["disabled"] == 0


def _cpu_signature():
    """The CPU's model and instruction-set flags (the library is built for this CPU)."""
    try:
        lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    keep = [line for line in lines if line.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(keep)))


def _build(tf, target):
    """Compiles SOURCE into `target` (written whole or not at all)."""
    compiler = os.environ.get("CXX", "g++")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        output = pathlib.Path(scratch) / target.name
        command = ([compiler, "-std=c++17", "-shared", "-fPIC", "-O3", "-march=native", "-w",
                    str(SOURCE), "-o", str(output)]
                   + tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags())
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{shlex.join(command)} failed:\n{result.stderr[-2000:]}")
        os.replace(output, target)  # atomic: a concurrent process sees all of it or none


@functools.cache
def zoneout_cell():
    """The op library of `zoneout_cell.cc` (`psmm_zoneout_cell`, `psmm_zoneout_cell_grad`),
    or None where it is turned off or cannot be built (logged once, with the reason).

    Raises:
        ValueError: `PSMM_TF_NATIVE` is set to something other than 0 or 1.
    """
    switch = os.environ.get("PSMM_TF_NATIVE", "1")
    if switch not in ("0", "1"):
        raise ValueError(f"PSMM_TF_NATIVE must be 0 (the LSTM cell as TensorFlow ops) or 1 "
                         f"(the native kernel where it builds), got {switch!r}.")
    if switch == "0":
        return None
    import tensorflow as tf

    try:
        key = hashlib.sha256("\n".join([SOURCE.read_text(), tf.__version__, _cpu_signature(),
                                        os.environ.get("CXX", "g++")]).encode()).hexdigest()
        cache = pathlib.Path(os.environ.get("PSMM_TF_CACHE",
                                            pathlib.Path.home() / ".cache" / "psmm_tf"))
        target = cache / f"zoneout_cell-{key[:16]}.so"
        if not target.exists():
            _build(tf, target)
        return tf.load_op_library(str(target))
    except (OSError, RuntimeError, tf.errors.OpError) as error:
        logging.getLogger("psmm_tf").warning(
            "The fused zoneout LSTM cell is unavailable (%s); the recurrence runs as "
            "TensorFlow ops (the same equations, slower on CPU).", error)
        return None
