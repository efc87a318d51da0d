"""Native TensorFlow kernels of psmm_tf, compiled on first use.

Five sources, one library, CPU kernels:
- `zoneout_cell.cc`: one step of the zoneout LSTM cell, forward and backward
  (`lstm_recurrence_tf` uses it);
- `zoneout_keep.cc`: zoneout's 0/1 training weights of a layer's h and c in one pass, the
  draws of TensorFlow's stateless generator bit for bit (`zoneout_lstm` uses it);
- `recurrent_product.cc`: the recurrence's products `h U` and `dz U^T` on a kernel packed
  once per call, bfloat16 on CPUs with AVX512-BF16 and float32 on CPUs with AVX-512
  (`lstm_recurrence_tf` uses it);
- `target_log_softmax.cc`: the target's log-probability of the vocabulary softmax, on 16-bit
  or float32 logits, forward and backward (`target_log_softmax_tf` uses it);
- `sgd_update.cc`: a gradient's squared norm and the SGD update `w - alpha g`, reading a 16-bit
  or float32 gradient in its own dtype (`psmm_tf.training.sgd_update` uses them);
and `kernel_util.h`, what they share.
A graph that holds them runs only where their library is loaded, which a SavedModel for TF
Serving must not need: so they are used only in graphs traced inside `enabled()`, which the
training steps open (psmm-train's `TrainStep` around its compiled step, the tasks' `train_step`
in Keras' `fit`); exports, `.keras` models, `predict` and `evaluate` trace the same equations as
TensorFlow ops. The library is built against the installed TensorFlow with the C++ compiler on
the path (`$CXX`, else `g++`), once per TensorFlow version, sources and CPU, into
`$PSMM_TF_CACHE` (default `~/.cache/psmm_tf`). Where it cannot be built (no compiler, no
TensorFlow headers, no writable cache) or `PSMM_TF_NATIVE=0` is set, `library()` returns None
and the same equations run as TensorFlow ops.
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

SOURCES = tuple(pathlib.Path(__file__).with_name(name)
                for name in ("zoneout_cell.cc", "zoneout_keep.cc", "recurrent_product.cc",
                             "target_log_softmax.cc", "sgd_update.cc"))
HEADERS = (pathlib.Path(__file__).with_name("kernel_util.h"),)

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
    """Within it, graphs traced may hold the native kernels (where they can be built and
    run)."""
    return _scope("enabled")


def disabled():
    """Within it, graphs traced hold no native kernel, also inside `enabled()` (to
    compare)."""
    return _scope("disabled")


def is_enabled():
    """Whether a graph traced now may hold the native kernels: inside `enabled()`, outside
    `disabled()`."""
    return _depth["enabled"] > 0 and _depth["disabled"] == 0


@functools.cache
def _cpuinfo_lines():
    """The lines of /proc/cpuinfo, or None where it cannot be read."""
    try:
        return tuple(pathlib.Path("/proc/cpuinfo").read_text().splitlines())
    except OSError:
        return None


@functools.cache
def cpu_flags():
    """The CPU's instruction-set flags (/proc/cpuinfo's), empty where they cannot be read."""
    return frozenset(flag for line in _cpuinfo_lines() or () if line.startswith("flags")
                     for flag in line.split(":", 1)[1].split())


def _cpu_signature():
    """The CPU's model and instruction-set flags (the library is built for this CPU)."""
    lines = _cpuinfo_lines()
    if lines is None:
        return platform.processor()
    keep = [line for line in lines if line.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(keep)))


def _build(tf, cxx, target):
    """Compiles SOURCES with the compiler `cxx` into `target` (written whole or not at all)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        output = pathlib.Path(scratch) / target.name
        command = ([cxx, "-std=c++17", "-shared", "-fPIC", "-O3", "-march=native", "-w",
                    *map(str, SOURCES), "-o", str(output)]
                   + tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags())
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{shlex.join(command)} failed:\n{result.stderr[-2000:]}")
        os.replace(output, target)  # atomic: a concurrent process sees all of it or none


def compiler():
    """The C++ compiler the kernels build with: `$CXX`, else `g++`."""
    return os.environ.get("CXX", "g++")


def for_trace(use=None):
    """The library for the graph being traced: `runnable()` where `use` is True, or where it
    is None (the default) and the trace is inside `enabled()`; else None."""
    if use is None:
        use = is_enabled()
    return runnable() if use else None


def runnable():
    """The library where the graph being traced can run its kernels, else None. They are CPU
    kernels: none under XLA (a `jit_compile` function) or with a GPU."""
    import tensorflow as tf

    if tf.config.list_logical_devices("GPU"):
        return None
    try:
        from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext
    except ImportError:  # moved: do not risk an XLA graph with an op XLA lacks
        return None
    if GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        return None
    return library()


@functools.cache
def library():
    """The op library (`psmm_zoneout_cell`, `psmm_zoneout_cell_grad`, `psmm_zoneout_keep`,
    `psmm_pack_kernel`, `psmm_packed_product`, `psmm_target_log_softmax`,
    `psmm_target_log_softmax_grad`, `psmm_squared_norm`, `psmm_resource_scaled_subtract`,
    `psmm_resource_scaled_subtract_rows`), or None where it is turned
    off or cannot be built (logged once, with the reason).

    Raises:
        ValueError: `PSMM_TF_NATIVE` is set to something other than 0 or 1.
    """
    switch = os.environ.get("PSMM_TF_NATIVE", "1")
    if switch not in ("0", "1"):
        raise ValueError(f"PSMM_TF_NATIVE must be 0 (TensorFlow ops only) or 1 (the native "
                         f"kernels where they build), got {switch!r}.")
    if switch == "0":
        return None
    import tensorflow as tf

    cxx = compiler()
    try:
        texts = [path.read_text() for path in SOURCES + HEADERS]
        key = hashlib.sha256("\n".join([*texts, tf.__version__, _cpu_signature(),
                                        cxx]).encode()).hexdigest()
        cache = pathlib.Path(os.environ.get("PSMM_TF_CACHE",
                                            pathlib.Path.home() / ".cache" / "psmm_tf"))
        target = cache / f"psmm_tf_kernels-{key[:16]}.so"
        if not target.exists():
            _build(tf, cxx, target)
        return tf.load_op_library(str(target))
    except (OSError, RuntimeError, tf.errors.OpError) as error:
        logging.getLogger("psmm_tf").warning(
            "psmm_tf's native kernels are unavailable (%s); the LSTM cell, zoneout's "
            "weights, the softmax's loss and the SGD update run as TensorFlow ops (the same "
            "equations, slower on CPU).", error)
        return None
