"""Test helpers: brute-force NumPy versions of the paper's equations and a shared TestCase.

The reference functions loop over positions and keys one at a time, written from the paper's
equations (Merity et al. 2016, eq. 1-9) rather than from the layer's vectorised code, so that a
test comparing the two can fail.
"""

import contextlib
import fcntl
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

# The checkout this module is in: its entry points are run as scripts from there.
REPO_ROOT = Path(__file__).resolve().parent.parent
# The native kernels' build folder of the tests (never a user's ~/.cache/psmm_tf, which live
# runs use): one per user and checkout, kept between test runs (the build takes minutes).
NATIVE_TEST_CACHE = Path(tempfile.gettempdir()) / (
    f"psmm_tf_test_kernels-{os.getuid()}-"
    f"{hashlib.sha256(str(REPO_ROOT).encode()).hexdigest()[:8]}")
# A folder shared by every process of one test run (pytest-xdist's workers; conftest.py sets
# it), where `made_once` keeps what one process makes for all; None: this process's own
# temporary folder.
SHARED_RUN_DIR = None


def jax_test_settings():
    """JAX's settings for the tests' processes on Keras' JAX backend, `{option: value}`: the
    programs are compiled with XLA's optimisation passes off (the tests' programs are tiny, so
    compiling dominates them) and kept in JAX's persistent compilation cache under
    `SHARED_RUN_DIR`, so a program that two processes of the run compile alike is compiled once
    (docs/design_notes.md, "How the tests stay cheap"). conftest.py sets them in the JAX leg's
    pytest processes (`jax.config`); `child_env` passes them to every child whose
    KERAS_BACKEND is jax (as JAX's `JAX_<OPTION>` variables), and to no other child."""
    settings = {"jax_disable_most_optimizations": True}
    if SHARED_RUN_DIR is not None:
        settings.update({
            "jax_compilation_cache_dir": os.path.join(SHARED_RUN_DIR, "jax_compilation_cache"),
            "jax_persistent_cache_min_compile_time_secs": 0,
            "jax_persistent_cache_min_entry_size_bytes": 0,
        })
    return settings


# XLA's flags in the tests' processes and their children: its LLVM optimisation passes off, as
# JAX's `jax_disable_most_optimizations` (`jax_test_settings`) has them. The `jit_compile`
# tests' programs are tiny, so compiling them is most of their time; the numbers they compare
# are those of the same graph.
XLA_TEST_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")


def use_xla_test_flags():
    """Adds `XLA_TEST_FLAGS` to $XLA_FLAGS (this process, which XLA reads at its first compile,
    and every child it starts) where $XLA_FLAGS does not set them already."""
    flags = os.environ.get("XLA_FLAGS", "").split()
    names = {flag.split("=")[0] for flag in flags}
    flags += [flag for flag in XLA_TEST_FLAGS if flag.split("=")[0] not in names]
    os.environ["XLA_FLAGS"] = " ".join(flags)


def use_native_test_cache():
    """Points `psmm_tf.native` (this process) and psmm-train children ($PSMM_TF_CACHE) at
    `NATIVE_TEST_CACHE`."""
    from psmm_tf import native

    os.environ["PSMM_TF_CACHE"] = str(NATIVE_TEST_CACHE)
    native.configure(cache_dir=str(NATIVE_TEST_CACHE))


# The real corpora (and --dataset=text folders) are prepared as TFDS datasets in TFDS's default
# data dir: in the tests (and the programs they start, which inherit it), a temporary one rather
# than ~/tensorflow_datasets. TFDS reads it once, at its import (not imported by psmm_tf's).
os.environ.setdefault("TFDS_DATA_DIR", tempfile.mkdtemp(prefix="psmm_tests_tfds_"))


def reference_pointer_sentinel(hidden, memory, memory_mask, query_kernel, query_bias, sentinel,
                               window_size):
    """Attention and gate, one position and key at a time.

    Args:
        hidden: `(B, T, D)`. memory: `(B, M, D)` or None. memory_mask: `(B, M)` or None.
        query_kernel: `(D, D)`; query_bias, sentinel: `(D,)`. window_size: int L.

    Returns:
        attention `(B, T, M + T)` float64 and gate `(B, T)` float64.
    """
    hidden = np.asarray(hidden, np.float64)
    batch, steps, _ = hidden.shape
    if memory is None:
        memory = np.zeros((batch, 0, hidden.shape[2]))
    memory = np.asarray(memory, np.float64)
    num_memory = memory.shape[1]
    if memory_mask is None:
        memory_mask = np.ones((batch, num_memory), bool)
    attention = np.zeros((batch, steps, num_memory + steps))
    gate = np.zeros((batch, steps))
    for b in range(batch):
        keys = np.concatenate([memory[b], hidden[b]], axis=0)
        valid = np.concatenate([np.asarray(memory_mask[b], bool), np.ones(steps, bool)])
        for t in range(steps):
            query = np.tanh(hidden[b, t] @ query_kernel + query_bias)  # eq. 4
            window = [k for k in range(num_memory + t - window_size + 1, num_memory + t + 1)
                      if k >= 0 and valid[k]]
            scores = [query @ keys[k] for k in window] + [query @ sentinel]  # eq. 5, 7
            scores = np.array(scores)
            weights = np.exp(scores - scores.max())
            weights /= weights.sum()
            for k, w in zip(window, weights[:-1]):
                attention[b, t, k] = w
            gate[b, t] = weights[-1]  # eq. 8
    return attention, gate


def reference_target_log_softmax(logits, targets, d_value):
    """float64 `log softmax(z)[y]` and the gradient of `sum(d_value * it)` in `z`,
    `d_value (one_hot(y) - softmax(z))`.

    Args:
        logits: `(..., V)`; targets: ints `(...)`; d_value: `(...)`.

    Returns:
        (value `(...)`, gradient `(..., V)`), float64.
    """
    z = np.asarray(logits, np.float64)
    top = z.max(-1, keepdims=True)
    log_sum = np.log(np.exp(z - top).sum(-1)) + top[..., 0]
    value = np.take_along_axis(z, targets[..., None], -1)[..., 0] - log_sum
    one_hot = np.eye(z.shape[-1])[targets]
    return value, d_value[..., None] * (one_hot - np.exp(z - log_sum[..., None]))


def reference_mixture_distribution(vocab_logits, attention, gate, key_ids):
    """`g p_vocab + sum_i a_i [x_i = w]` for every word (eq. 3), as a dense float64 array."""
    logits = np.asarray(vocab_logits, np.float64)
    vocab = np.exp(logits - logits.max(-1, keepdims=True))
    vocab /= vocab.sum(-1, keepdims=True)
    dist = np.asarray(gate, np.float64)[..., None] * vocab
    batch, steps, num_keys = attention.shape
    for b in range(batch):
        for t in range(steps):
            for k in range(num_keys):
                dist[b, t, key_ids[b, k]] += attention[b, t, k]
    return dist


def reference_mixture_log_prob(vocab_logits, attention, gate, key_ids, targets):
    """`log p(y)` from the dense reference distribution."""
    dist = reference_mixture_distribution(vocab_logits, attention, gate, key_ids)
    batch, steps = targets.shape
    return np.log(np.array([[dist[b, t, targets[b, t]] for t in range(steps)]
                            for b in range(batch)]))


def reference_pointer_loss(attention, gate, key_ids, targets):
    """`-log(g + sum_{i: x_i = y} a_i)` (eq. 9), with explicit loops."""
    batch, steps = targets.shape
    out = np.zeros((batch, steps))
    for b in range(batch):
        for t in range(steps):
            mass = sum(attention[b, t, k] for k in range(attention.shape[2])
                       if key_ids[b, k] == targets[b, t])
            out[b, t] = -np.log(gate[b, t] + mass)
    return out


def reference_cache_log_probs(model_log_probs, hidden, targets, theta, lam, window):
    """Grave et al.'s cache on one stream, looped: `log((1 - lam) p_model + lam p_cache)`.

    `p_cache(y_t) ∝ sum_{i in [t - W, t), y_i = y_t} exp(theta h_t . h_i)` (the word that
    followed state i is `targets[i]`); with no history (t = 0) p is the model's alone.

    Args:
        model_log_probs: float `(T,)`, the model's `log p(y_t)`.
        hidden: float `(T, H)`, its top-layer hidden states.
        targets: int `(T,)`.
        theta, lam: floats. window: int W.

    Returns:
        float64 `(T,)`.
    """
    out = np.array(model_log_probs, np.float64)
    for t in range(len(targets)):
        history = range(max(0, t - window), t)
        if not history:
            continue
        scores = np.array([theta * hidden[t] @ hidden[i] for i in history])
        weights = np.exp(scores - scores.max())
        weights /= weights.sum()
        p_cache = sum(w for w, i in zip(weights, history, strict=True)
                      if targets[i] == targets[t])
        out[t] = np.log((1 - lam) * np.exp(model_log_probs[t]) + lam * p_cache)
    return out


def value_and_gradients(fn, args):
    """`fn(*args)` (a scalar) and its gradients with respect to each of `args`, on any backend.

    Uses `tf.GradientTape` on TensorFlow, `jax.value_and_grad` on JAX and `torch.autograd` on
    PyTorch. To differentiate with respect to a layer's weights, pass them as `args` and call
    `layer.stateless_call` inside `fn`.

    Args:
        fn: callable of `len(args)` tensors returning a scalar tensor.
        args: sequence of arrays (converted to tensors of their own dtype).

    Returns:
        `(value, gradients)`: a NumPy scalar and a list of NumPy arrays shaped like `args`.
    """
    backend = keras.backend.backend()
    args = [keras.ops.convert_to_tensor(arg) for arg in args]
    if backend == "tensorflow":
        with tf.GradientTape() as tape:
            tape.watch(args)
            value = fn(*args)
        gradients = tape.gradient(value, args)
    elif backend == "jax":
        import jax

        value, gradients = jax.value_and_grad(fn, argnums=tuple(range(len(args))))(*args)
    elif backend == "torch":
        import torch

        args = [arg.detach().requires_grad_(True) for arg in args]
        value = fn(*args)
        gradients = torch.autograd.grad(value, args)
    else:
        raise NotImplementedError(f"No gradients on the {backend} backend.")
    return (keras.ops.convert_to_numpy(value),
            [keras.ops.convert_to_numpy(g) for g in gradients])


def numerical_gradients(fn, args, delta=1e-5):
    """Central finite differences of the scalar `fn(*args)` with respect to each of `args`.

    Each element is perturbed in turn, so keep `args` small (see `gradient_check_settings`).
    """
    args = [np.array(arg) for arg in args]
    gradients = []
    for arg in args:
        gradient = np.zeros(arg.shape)
        for index in np.ndindex(arg.shape):
            original = arg[index]
            arg[index] = original + delta
            above = float(keras.ops.convert_to_numpy(fn(*args)))
            arg[index] = original - delta
            below = float(keras.ops.convert_to_numpy(fn(*args)))
            arg[index] = original
            gradient[index] = (above - below) / (2 * delta)
        gradients.append(gradient)
    return gradients


def gradient_check_settings():
    """`(dtype, delta, tolerance)` for comparing gradients with `numerical_gradients`.

    float64 with a small step where the backend computes in float64; float32 with a larger
    step and tolerance on JAX, where `keras.ops` compute in 32 bits whatever the input (Keras'
    dtype promotion maps float64 to float32 there, even with `jax_enable_x64`).
    """
    if keras.backend.backend() == "jax":
        return "float32", 1e-3, 2e-3
    return "float64", 1e-6, 1e-6


def compiled(fn, jit_compile=True):
    """`fn` compiled by the backend's compiler: XLA through `tf.function` or `jax.jit`
    (`jit_compile=False`: a plain `tf.function` graph on TensorFlow, as most callers make).

    Keras variables that `fn` reads are captured as they are (no state is updated inside).
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return tf.function(fn, jit_compile=jit_compile)
    if backend == "jax":
        import jax

        return jax.jit(fn)
    if backend == "torch":
        import torch

        return torch.compile(fn)
    return fn


def has_cxx_compiler():
    """Whether the C++ compiler psmm_tf's native kernels build with
    (`native.settings().compiler`) is on the path."""
    import shutil

    from psmm_tf import native

    return shutil.which(native.settings().compiler) is not None


def native_library(test):
    """psmm_tf's native kernels' library for `test`: the test is skipped where no C++ compiler
    is on the path, and fails where the kernels do not build."""
    from psmm_tf import native

    if not has_cxx_compiler():
        test.skipTest("no C++ compiler: the native kernels are not built")
    library = native.library()
    test.assertIsNotNone(library, "the native kernels failed to build")
    return library


def skip_unless_tensorflow(reason="TensorFlow-specific"):
    """Decorator: the test runs only on the TensorFlow backend."""
    import unittest

    return unittest.skipUnless(keras.backend.backend() == "tensorflow", reason)


def child_env(env=None, paths=(), log_level="3"):
    """The environment of a child Python: this one with the repository (then `paths`) first on
    PYTHONPATH, TensorFlow's C++ logging at `log_level` unless set, then `env` on top; a child
    on Keras' JAX backend also gets `jax_test_settings()` unless set."""
    result = dict(os.environ)
    result["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *map(str, paths),
                                            result.get("PYTHONPATH", "")])
    result.setdefault("TF_CPP_MIN_LOG_LEVEL", log_level)
    result.update(env or {})
    if result.get("KERAS_BACKEND") == "jax":
        for option, value in jax_test_settings().items():
            result.setdefault(option.upper(), str(value).lower())
    return result


# The programs' scripts and the modules a console script runs (`main()`).
PROGRAM_MODULES = {"trainers/train.py": "psmm_tf.trainers.train",
                   "trainers/evaluate.py": "psmm_tf.trainers.evaluate",
                   "export/export_saved_model.py": "psmm_tf.export.export_saved_model",
                   "export/score.py": "psmm_tf.export.score"}
# Environment variables a program reads when it runs (not when TensorFlow, Keras or psmm_tf is
# imported): a child given only these may start from the fork server.
RUN_TIME_VARIABLES = frozenset({"TF_CONFIG"})


def _program_context():
    """multiprocessing's fork server, which imports psmm_tf (TensorFlow, Keras) once; each
    program child forks from it, a process that has run no TensorFlow op. One server per test
    process, started at its first program child."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["psmm_tf", "psmm_tf.testing"])
    return context


def _run_program(module, argv, environ, stdout_path, stderr_path):
    """In the forked child: the console script's run of `module.main()` with `sys.argv = argv`,
    in `environ` and the repository root, fd 1 and 2 on the given files."""
    import importlib

    for fd, path in ((1, stdout_path), (2, stderr_path)):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(REPO_ROOT)
    sys.argv = list(argv)
    # Ctrl-C as in a program started from a terminal, even where the server started ignoring it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # psmm-score's main returns its status; the others return None (0).
    sys.exit(importlib.import_module(module).main())


class ForkedProgram:
    """A program child from the fork server, with the part of `subprocess.Popen`'s interface
    the tests use: `pid`, `returncode`, `poll`, `wait`, `send_signal`, `kill`, `communicate`.
    Its output goes to files, read by `communicate` (`stdout`/`stderr`: `subprocess.PIPE` or
    `subprocess.DEVNULL`), so a child that writes a lot never blocks on a full pipe."""

    def __init__(self, module, argv, environ, stdout=None, stderr=None, text=False):
        if not {stdout, stderr} <= {None, subprocess.PIPE, subprocess.DEVNULL}:
            raise ValueError("a ForkedProgram's stdout and stderr are subprocess.PIPE, "
                             f"subprocess.DEVNULL or None (DEVNULL), got {stdout!r}, {stderr!r}")
        # The piped outputs' files (None: not piped) in a folder removed by `communicate`.
        self._folder = (tempfile.mkdtemp(prefix="psmm_program_")
                        if subprocess.PIPE in (stdout, stderr) else None)
        self._outputs = [os.path.join(self._folder, name) if mode == subprocess.PIPE else None
                         for name, mode in (("stdout", stdout), ("stderr", stderr))]
        for path in filter(None, self._outputs):
            Path(path).touch()  # empty output where the child is killed before it opens them
        self._text = text
        self._process = _program_context().Process(
            target=_run_program,
            args=(module, argv, environ, *(path or os.devnull for path in self._outputs)))
        self._process.start()
        self.pid = self._process.pid
        self.returncode = None

    def poll(self):
        if self.returncode is None and self._process.exitcode is not None:
            self.returncode = self._process.exitcode  # -N when killed by signal N, as Popen's
        return self.returncode

    def wait(self, timeout=None):
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self._process.name, timeout)
        return self.returncode

    def send_signal(self, signum):
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout=None):
        self.wait(timeout)
        outputs = []
        for path in self._outputs:
            data = Path(path).read_bytes() if path else None
            outputs.append(data.decode() if data is not None and self._text else data)
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)
        return tuple(outputs)


def start_program(module, argv, env=None, **kwargs):
    """Starts `module.main()` with `sys.argv = argv` (a console script's run) in a child of the
    fork server, in `child_env(env)`; returns its `ForkedProgram` (`kwargs`: its output)."""
    return ForkedProgram(module, list(argv), child_env(env), **kwargs)


def _forked(script, env):
    """Whether a child of `script` with `env` may start from the fork server."""
    return script in PROGRAM_MODULES and set(env or {}) <= RUN_TIME_VARIABLES


def run_script(script, args, env=None, timeout=240):
    """Runs `python <script> <args>` from the repository root; returns the CompletedProcess.

    A program's script with no import-time environment (`RUN_TIME_VARIABLES`) runs its
    console script's `main()` in a child of the fork server instead (no TensorFlow start: seconds
    each); the same argv (its script's path first), environment and folder.
    """
    command = [sys.executable, str(REPO_ROOT / script), *args]
    if _forked(script, env):
        child = start_script(script, args, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            stdout, stderr = child.communicate(timeout=timeout)
        finally:
            child.kill()
        return subprocess.CompletedProcess(command, child.returncode, stdout, stderr)
    return subprocess.run(command, cwd=REPO_ROOT, env=child_env(env), capture_output=True,
                          text=True, timeout=timeout)


def start_script(script, args, env=None, **kwargs):
    """Starts `python <script> <args>` in the background; returns the Popen (a `ForkedProgram`
    for a program's script with no import-time environment, as in `run_script`).

    The child takes Ctrl-C (SIGINT) as a program started from a terminal does, even where this
    process ignores it (tests run as a background job): an ignored signal stays ignored across
    exec, a handled one starts at its default, which Python turns into KeyboardInterrupt (a fork
    server's child sets Python's handler itself).
    """
    if _forked(script, env):
        return start_program(PROGRAM_MODULES[script], [str(REPO_ROOT / script), *args], env,
                             **kwargs)
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([sys.executable, str(REPO_ROOT / script), *args], cwd=REPO_ROOT,
                                env=child_env(env), **kwargs)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_in_fresh_process(code, timeout=300, env=None):
    """Runs Python `code` in a new interpreter with the repository on its path; returns stdout.

    Raises AssertionError with the child's output when it fails.
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
        timeout=timeout, env=child_env(env, log_level="2"),
    )
    if result.returncode != 0:
        raise AssertionError(
            f"Child process failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result.stdout


def main_in_process(main, argv, env=None):
    """`(exit status, stderr)` of a program's `main(argv)` (`argv[0]` its name) run in this
    process: no new interpreter, so no TensorFlow start (seconds each). The global absl flags
    are parsed afresh and restored afterwards, and `env` is set in `os.environ` for the call
    only. An exception other than the program's exit propagates (a traceback).
    """
    import contextlib
    import io

    from absl import flags
    from absl.testing import flagsaver

    err = io.StringIO()
    environ = dict(os.environ)
    os.environ.update(env or {})
    try:
        with flagsaver.flagsaver(), contextlib.redirect_stderr(err):
            flags.FLAGS.unparse_flags()
            try:
                main(list(argv))
                code = 0
            except SystemExit as exit_:
                # sys.exit(None), as absl's app.run ends a main that returns, is success.
                code = 0 if exit_.code is None else (
                    exit_.code if isinstance(exit_.code, int) else 1)
                if isinstance(exit_.code, str):
                    err.write(exit_.code + "\n")
    finally:
        os.environ.clear()
        os.environ.update(environ)
        flags.FLAGS.unparse_flags()
    return code, err.getvalue()


def train_in_process(args):
    """`main_in_process` of psmm-train with `args` (no TF_CONFIG: one machine)."""
    from psmm_tf.trainers import train

    return main_in_process(train.main, ["psmm-train", *args], env={"TF_CONFIG": ""})


def mains_in_one_process(module, argvs, env=None, timeout=300, process_env=None):
    """`[(exit status, stderr)]` of `module.main(argv)` for each of `argvs`, all run one after
    the other (`main_in_process`) in one new interpreter: one TensorFlow start for all of them.

    For programs whose global absl flags cannot share a process with psmm-train's (the same
    names, e.g. psmm-evaluate's --workdir). `module` is one module's name for all of `argvs`
    or a list of one per argv; `env` is each call's, as in `main_in_process`; `process_env` the
    new interpreter's (e.g. KERAS_BACKEND, read when Keras is imported).
    """
    modules = [module] * len(argvs) if isinstance(module, str) else list(module)
    code = f"""
        import importlib
        import json
        from psmm_tf.testing import main_in_process
        results = [main_in_process(importlib.import_module(name).main, argv, {env!r})
                   for name, argv in zip({modules!r}, {[list(a) for a in argvs]!r})]
        print("MAINS_IN_ONE_PROCESS " + json.dumps(results))
    """
    out = run_in_fresh_process(code, timeout=timeout, env=process_env)
    line = next(line for line in out.splitlines() if line.startswith("MAINS_IN_ONE_PROCESS "))
    return [tuple(result) for result in json.loads(line.split(" ", 1)[1])]


def main():
    """Runs a test module's tests when the file is run directly (`python x_test.py`)."""
    tf.test.main()


class TestCase(tf.test.TestCase):
    """`tf.test.TestCase` with a fixed seed per test.

    Its assertions take NumPy arrays and the tensors of every Keras backend.
    """

    def setUp(self):
        super().setUp()
        tf.random.set_seed(1234)
        np.random.seed(1234)
        self.rng = np.random.default_rng(1234)

    def run_serialization_test(self, instance):
        """keras-hub's check: `get_config` -> `from_config` -> `get_config` gives the same
        config, through `keras.saving` serialisation (registered name, JSON) too."""
        import json

        import keras

        config = instance.get_config()
        json.dumps(config)  # every value is JSON: it goes into .keras files and exports
        clone = type(instance).from_config(config)
        self.assertEqual(clone.get_config(), config)
        serialized = keras.saving.serialize_keras_object(instance)
        self.assertEqual(serialized["registered_name"],
                         keras.saving.get_registered_name(type(instance)))
        revived = keras.saving.deserialize_keras_object(json.loads(json.dumps(serialized)))
        self.assertIsInstance(revived, type(instance))
        self.assertEqual(revived.get_config(), config)
        return revived


def scores_after_keras_round_trip(model, text, directory, check="", backend=None):
    """Saves `model` as `.keras`, loads it in a fresh process, and returns its scores of `text`.

    The child imports only `psmm_tf` (which registers the classes) and `keras`, and loads with
    `safe_mode` on; `backend` ("tensorflow", "jax", ...) is its `KERAS_BACKEND` (default: this
    process's).

    Args:
        model: a language model of the package, or a dict {name: model} of several, all loaded
            in the one fresh process (one interpreter start).
        text: int `(B, N + 1)`; scored as inputs `text[:, :-1]`, targets `text[:, 1:]`.
        directory: a temporary folder for the files.
        check: optional Python statements run in the child after loading each model (`model`
            and its `name` are bound).

    Returns:
        The child's `score()` log-probabilities, `(B, N)` (a dict of them for a dict). The
        files stay in `directory` as `<name>.keras` (`model.keras` for a single model), for
        the caller to read back too.
    """
    models = model if isinstance(model, dict) else {"model": model}
    for name, each in models.items():
        each.save(os.path.join(directory, f"{name}.keras"))
    text_path = os.path.join(directory, "text.npy")
    out_path = os.path.join(directory, "scores.npz")
    np.save(text_path, text)
    check = textwrap.indent(textwrap.dedent(check), " " * 16)
    run_in_fresh_process(f"""
            import os
            import numpy as np, keras
            import psmm_tf  # registers the custom objects
            text = np.load({text_path!r})
            scores = {{}}
            for name in {list(models)!r}:
                model = keras.saving.load_model(os.path.join({directory!r}, name + ".keras"))
{check}
                scores[name] = keras.ops.convert_to_numpy(
                    model.score_with_state(text[:, :-1], text[:, 1:])["log_probs"])
            np.savez({out_path!r}, **scores)
    """, env={"KERAS_BACKEND": backend or keras.backend.backend()})
    scores = dict(np.load(out_path))
    return scores if isinstance(model, dict) else scores["model"]


# Arguments of `language_model` that belong to the backbone; the rest go to the task.
_BACKBONE_ARGUMENTS = ("vocab_size", "embedding_dim", "hidden_dim", "num_layers",
                       "input_dropout", "hidden_dropout", "zoneout")


def language_model(cls, seed=None, **kwargs):
    """A task of class `cls` on a new `LSTMBackbone`, from flat keyword arguments (tests only).

    Backbone arguments (`vocab_size`, `embedding_dim`, `hidden_dim`, `num_layers`, the
    backbone's dropouts and `zoneout`) build the backbone; `seed` seeds both; the rest are the
    task's (`window_size`, `output_dropout`, `softmax`, ...). Unset regularisation is the
    paper's (dropout 0.5, zoneout 0.1), as `ModelConfig`'s defaults.
    """
    from psmm_tf.models import LSTMBackbone

    kwargs = {"input_dropout": 0.5, "hidden_dropout": 0.5, "zoneout": 0.1, **kwargs}
    backbone_kwargs = {name: kwargs.pop(name) for name in _BACKBONE_ARGUMENTS if name in kwargs}
    return cls(LSTMBackbone(seed=seed, **backbone_kwargs), seed=seed, **kwargs)


def tiny_config(**train):
    """The `tiny` preset on a small synthetic corpus, with short epochs and evaluations."""
    from psmm_tf import configs

    fields = {"steps_per_epoch": 12, "max_epochs": 1, "checkpoint_every_steps": 5,
              "max_eval_tokens": 300}
    fields.update(train)
    return configs.get_preset("tiny").replace(train=fields,
                                              data={"synthetic_train_tokens": 4000})


# Hostile inputs (docs/hostile_inputs.md): what every file touched must keep, a user's corpus,
# and one trained run per process that each case copies.

def snapshot(directory):
    """{relative path: bytes} of every file under `directory`."""
    directory = Path(directory)
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def write_text_corpus(directory):
    """A user's corpus folder: train.txt.gz, valid.txt, test.txt and a vocab.txt of theirs."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    line = "the cat sat on the mat and the dog sat on the log .\n"
    with gzip.open(directory / "train.txt.gz", "wt") as f:
        f.write(line * 200)
    (directory / "valid.txt").write_text(line * 10)
    (directory / "test.txt").write_text(line * 10)
    (directory / "vocab.txt").write_text("<unk>\n<eos>\nthe\ncat\n")
    return directory


def truncate(path, size=100):
    """Cuts file `path` to its first `size` bytes (a damaged file)."""
    path = Path(path)
    path.write_bytes(path.read_bytes()[:size])


@contextlib.contextmanager
def file_size_limit(limit_bytes):
    """A full disk in this process until the block ends: writes past `limit_bytes` of a file
    fail with EFBIG ("File too large"), as they fail with ENOSPC on a full disk (RLIMIT_FSIZE's
    soft limit; SIGXFSZ ignored, so that the write fails instead of killing the process)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def drop_file_permission_override():
    """preexec_fn: the child loses CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (root ignores a
    folder's mode otherwise), so a read-only folder is read-only to it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def made_once(name, make):
    """The folder `name` under `SHARED_RUN_DIR` (else this process's temporary folder), made
    by `make(path)` once for every process of the test run: the first to ask makes it under a
    file lock while the others wait, then marks it complete; a folder a killed process left
    incomplete is made again. Read what it holds, or copy it to change it."""
    root = Path(SHARED_RUN_DIR or tf.compat.v1.test.get_temp_dir())
    path, complete = root / name, root / f"{name}.complete"
    with open(root / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not complete.exists():
                shutil.rmtree(path, ignore_errors=True)
                make(path)
                complete.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path


def trained_tiny_run(kind="psmm"):
    """The folder of a finished `tiny_config()` run of model `kind` ("psmm", "lstm",
    "pointer_softmax"): 12 steps, checkpoints 5, 10, 12, the same synthetic corpus and
    vocabulary for every kind. Trained once per test run (`made_once`), on first use; read
    it, or copy it to change it."""
    from psmm_tf.training import train_lib

    def train(path):
        train_lib.run(tiny_config().replace(model={"kind": kind}), path, verbose=0)

    return made_once("hostile_base_run" if kind == "psmm" else f"tiny_{kind}_run", train)


class TrainedRunTestCase(tf.test.TestCase):
    """One tiny synthetic run (`trained_tiny_run()`), trained once per test run and copied by
    each test."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.base = trained_tiny_run()

    def copy_run(self, name):
        workdir = Path(self.get_temp_dir()) / name
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.copytree(self.base, workdir)
        return workdir


# A tiny vocabulary and task for the tasks' keras-hub API tests (causal_lm_test.py and
# causal_lm_hostile_test.py).
TINY_WORDS = ["<unk>", "<eos>"] + [f"w{i}" for i in range(20)]


def tiny_task(cls=None, dropout=0.1, sequence_length=12, **kwargs):
    """A 2x8 task (`PointerSentinelLM` unless `cls` is given) over `TINY_WORDS`, window 6,
    with its preprocessor (`sequence_length` tokens)."""
    from psmm_tf.data.vocabulary import Vocabulary
    from psmm_tf.models import LanguageModelPreprocessor, LSTMBackbone, PointerSentinelLM

    cls = cls or PointerSentinelLM
    backbone = LSTMBackbone(len(TINY_WORDS), 8, 8, 2, input_dropout=dropout,
                            hidden_dropout=dropout, zoneout=dropout, seed=3, name="backbone")
    preprocessor = LanguageModelPreprocessor(Vocabulary(TINY_WORDS),
                                             sequence_length=sequence_length)
    return cls(backbone, window_size=6, seed=3, output_dropout=dropout,
               preprocessor=preprocessor, **kwargs)


def random_ids(rng, rows, steps):
    """(token_ids, target_ids), each [rows, steps] int32: random words of `TINY_WORDS` other
    than <unk> and <eos>, the targets shifted by one."""
    text = rng.integers(2, len(TINY_WORDS), size=(rows, steps + 1)).astype("int32")
    return text[:, :-1], text[:, 1:]

