"""psmm_tf's native CPU kernels: one optional component behind one switch, decided here.

Five C++ sources build one TensorFlow op library (`psmm_tf.native.build`, the loader):
- `zoneout_cell.cc`: one step of the zoneout LSTM cell, forward and backward
  (`psmm_tf.layers.lstm_recurrence_tf`);
- `zoneout_keep.cc`: zoneout's 0/1 training weights of a layer's h and c in one pass, the
  draws of TensorFlow's stateless generator bit for bit (`psmm_tf.layers.zoneout_lstm`);
- `recurrent_product.cc`: the recurrence's products `h U` and `dz U^T` on a kernel packed
  once per call, bfloat16 on CPUs with AVX512-BF16 and float32 on CPUs with AVX-512
  (`psmm_tf.layers.lstm_recurrence_tf`);
- `target_log_softmax.cc`: the target's log-probability of the vocabulary softmax, on 16-bit
  or float32 logits, forward and backward (`psmm_tf.layers.target_log_softmax_tf`);
- `sgd_update.cc`: a gradient's squared norm and the SGD update `w - alpha g`, reading a 16-bit
  or float32 gradient in its own dtype (`psmm_tf.gradients`, `psmm_tf.training.sgd_update`);
and `kernel_util.h`, what they share. Each has a TensorFlow-ops path computing the same
equations, which is the reference (every kernel is tested against it).

The one switch, like Keras' `use_cudnn`: `mode` "auto" (the default) uses the kernels where
they can run and otherwise falls back to TensorFlow ops with one log line naming the reason;
"on" raises `NativeKernelsUnavailable` naming what is missing (a compiler, TensorFlow's
headers, a usable cache folder) or what rules them out (a GPU, an XLA-compiled step); "off"
never builds them. A psmm-train run (`train_lib.run`) sets it from `TrainConfig.native`
(`--native`) while it trains, and sets it back after; a Keras `fit` user calls `configure`:

```python
import dataclasses

import psmm_tf

previous = psmm_tf.native.configure(mode="off")  # TensorFlow ops only, nothing built
assert psmm_tf.native.library() is None
# e.g. configure(mode="on", cache_dir="~/.cache/psmm_tf", compiler="clang++")
psmm_tf.native.configure(**dataclasses.asdict(previous))
```

A graph holding the kernels runs only where their library is loaded, which a SavedModel for TF
Serving must not need: they are used only in graphs traced inside `enabled()`, which the
training steps open (psmm-train's `TrainStep`, the tasks' `train_step` in Keras' `fit`), each
saying whether the function it traces is XLA-compiled; exports, `.keras` models, `predict` and
`evaluate` trace TensorFlow ops. This module is the only one that reads the switch and the
loader's answer; the layers ask `library_for(kernel, dtype)`. It reads no environment variable.
"""

import contextlib
import dataclasses
import functools
import logging
import pathlib

from psmm_tf.native import build

MODES = ("auto", "on", "off")
KERNELS = ("zoneout_cell", "zoneout_keep", "recurrent_product", "target_log_softmax",
           "sgd_update")
DEFAULT_CACHE_DIR = "~/.cache/psmm_tf"
DEFAULT_COMPILER = "g++"
# The dtypes a kernel reads (a kernel not listed: whatever its caller passes).
_DTYPES = {"target_log_softmax": ("bfloat16", "float16", "float32"),
           "sgd_update": ("bfloat16", "float16", "float32"),
           "recurrent_product": ("bfloat16", "float32")}
# The CPU flag a kernel needs per dtype (the CPUs it is written for).
_CPU_FLAG = {"recurrent_product": {"bfloat16": "avx512_bf16", "float32": "avx512f"}}

_log = logging.getLogger("psmm_tf")


class NativeKernelsUnavailable(RuntimeError):
    """`mode="on"` and the kernels cannot run here; the message names why."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """The process's native-kernel settings (`configure`)."""

    # "auto", "on" or "off" (see the module docstring).
    mode: str = "auto"
    # Folder of the built library: absolute, or starting with ~.
    cache_dir: str = DEFAULT_CACHE_DIR
    # The C++ compiler command.
    compiler: str = DEFAULT_COMPILER


_settings = Settings()
# Module-wide, not per thread: tf.distribute traces its replicas in threads of their own.
_scopes = {"enabled": 0, "disabled": 0, "jit": 0, "kernels": []}
_logged = set()


def check_mode(mode, name="native"):
    """Raises ValueError unless `mode` is one of MODES."""
    if mode not in MODES:
        raise ValueError(f"{name} must be one of {MODES}, got {mode!r}.")
    return mode


def configure(mode=None, cache_dir=None, compiler=None):
    """Sets the process's native-kernel settings; None leaves a setting as it is.

    Args:
        mode: "auto", "on" or "off": the one switch the training steps read when they trace.
        cache_dir: str, the build folder (default "~/.cache/psmm_tf"; `~` is expanded).
        compiler: str, the C++ compiler command (default "g++").

    Returns:
        The previous `Settings` (to restore with `configure(**dataclasses.asdict(old))`).

    Raises:
        ValueError: `mode` is not one of MODES, or `cache_dir` / `compiler` is not a string.
    """
    global _settings
    for name, value in (("cache_dir", cache_dir), ("compiler", compiler)):
        if value is not None and not isinstance(value, (str, pathlib.PurePath)):
            raise ValueError(f"psmm_tf.native.configure: {name} must be a string, got "
                             f"{value!r}.")
    changes = {name: str(value) if isinstance(value, pathlib.PurePath) else value
               for name, value in (("mode", mode), ("cache_dir", cache_dir),
                                   ("compiler", compiler)) if value is not None}
    if mode is not None:
        check_mode(mode, "psmm_tf.native.configure: mode")
    old, _settings = _settings, dataclasses.replace(_settings, **changes)
    if (old.cache_dir, old.compiler) != (_settings.cache_dir, _settings.compiler):
        _load.cache_clear()
    return old


def settings():
    """The current `Settings`."""
    return _settings


@contextlib.contextmanager
def _scope(**changes):
    for key, value in changes.items():
        if isinstance(_scopes[key], list):
            _scopes[key].append(value)
        else:
            _scopes[key] += value
    try:
        yield
    finally:
        for key, value in changes.items():
            if isinstance(_scopes[key], list):
                _scopes[key].pop()
            else:
                _scopes[key] -= value


def enabled(jit_compile=False):
    """Within it, graphs traced may hold the native kernels (the training steps open it), as
    the switch's mode (`configure`) says when they trace.

    Args:
        jit_compile: bool. Whether the function traced inside is XLA-compiled (no kernel
            then: XLA has none of them); nested scopes add up.
    """
    return _scope(enabled=1, jit=int(bool(jit_compile)))


def disabled():
    """Within it, graphs traced hold no native kernel, also inside `enabled()` (to compare)."""
    return _scope(disabled=1)


def only(*kernels):
    """Within it, only `kernels` (names of KERNELS) may be used (a per-kernel A/B)."""
    unknown = sorted(set(kernels) - set(KERNELS))
    if unknown:
        raise ValueError(f"unknown native kernel(s) {unknown}; expected names of {KERNELS}.")
    return _scope(kernels=frozenset(kernels))


@functools.cache
def cpu_flags():
    """The CPU's instruction-set flags (/proc/cpuinfo's), empty where they cannot be read."""
    return frozenset(flag for line in build.cpu_info_lines() if line.startswith("flags")
                     for flag in line.split(":", 1)[1].split())


@functools.cache
def _load():
    """The library, or the `build.Unavailable` that says why not (cached per settings)."""
    try:
        return build.load(_settings.cache_dir, _settings.compiler)
    except build.Unavailable as error:
        return error


def _unavailable(reason, mode, level=logging.WARNING):
    """None, after one log line per reason ("auto"); raises under "on"."""
    if mode == "on":
        raise NativeKernelsUnavailable(f"native='on' but psmm_tf's native kernels cannot run: "
                                       f"{reason}. Use native='auto' or 'off'.")
    if reason not in _logged:
        _logged.add(reason)
        _log.log(level, "psmm_tf native kernels not used (%s); the same equations run as "
                 "TensorFlow ops.", reason)
    return None


def library(mode=None):
    """The op library where it builds and loads, else None ("auto", one log line) or
    `NativeKernelsUnavailable` ("on"); None under "off" (`mode` None: `settings().mode`)."""
    mode = check_mode(mode or _settings.mode)
    if mode == "off":
        return None
    loaded = _load()
    return _unavailable(str(loaded), mode) if isinstance(loaded, Exception) else loaded


def check(mode=None, jit_compile=False):
    """The library a training step would use under `mode` (None: the switch's), or None,
    built now: under "on", `NativeKernelsUnavailable` before the step traces, naming why."""
    previous = configure(mode=mode)
    try:
        with enabled(jit_compile=jit_compile):
            return library_for("zoneout_cell")
    finally:
        configure(mode=previous.mode)


def library_for(kernel, dtype=None, use=None):
    """The op library for `kernel` in the graph being traced now, or None: TensorFlow ops.

    Args:
        kernel: a name of KERNELS.
        dtype: the dtype (a name or a `tf.DType`) the kernel would read, where it matters.
        use: optional bool. None (the default): inside `enabled()` and outside `disabled()`;
            True: also outside `enabled()` (tests); False: never.

    Returns:
        The library where the mode is not "off", the trace is not XLA-compiled, no GPU is
        visible, the backend is TensorFlow, the kernel reads `dtype` on this CPU and the
        library builds and loads; else None.

    Raises:
        NativeKernelsUnavailable: the mode is "on" and the kernels cannot run.
    """
    if kernel not in KERNELS:
        raise ValueError(f"unknown native kernel {kernel!r}; expected one of {KERNELS}.")
    if use is None:
        use = _scopes["enabled"] > 0 and _scopes["disabled"] == 0
    mode = _settings.mode
    if not use or mode == "off" or (_scopes["kernels"] and kernel not in _scopes["kernels"][-1]):
        return None
    name = None if dtype is None else getattr(dtype, "name", str(dtype))
    if kernel in _DTYPES and name is not None and name not in _DTYPES[kernel]:
        return None  # this kernel reads other dtypes; the ops path computes it
    flag = _CPU_FLAG.get(kernel, {}).get(name, "")
    if kernel in _CPU_FLAG and (not flag or flag not in cpu_flags()):
        return None  # written for other CPUs
    import keras

    if keras.backend.backend() != "tensorflow":
        return None
    if _scopes["jit"] > 0:
        return _unavailable("the step is XLA-compiled (jit_compile)", mode, logging.INFO)
    import tensorflow as tf

    if tf.config.list_logical_devices("GPU"):
        return _unavailable("a GPU is present: they are CPU kernels", mode, logging.INFO)
    return library(mode)
