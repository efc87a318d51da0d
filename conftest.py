"""pytest: the native kernels of every test process build into the tests' own cache folder
(`psmm_tf.testing.NATIVE_TEST_CACHE`), never into a user's ~/.cache/psmm_tf; the processes of
one run (pytest-xdist's workers) share one temporary folder (`psmm_tf.testing.SHARED_RUN_DIR`)
for what the tests make once, removed by the run's first process at its end. JAX keeps its compiled
programs there too (its persistent compilation cache), so a program that two tests compile alike,
in any process of the run, child interpreters included, is compiled once."""

import os
import shutil
import tempfile

# The shared folder's path, from the run's first process to the workers it starts.
SHARED_RUN_DIR_VARIABLE = "PSMM_TF_TEST_SHARED_RUN_DIR"
_made_here = []


def pytest_configure(config):
    del config
    if SHARED_RUN_DIR_VARIABLE not in os.environ:
        os.environ[SHARED_RUN_DIR_VARIABLE] = tempfile.mkdtemp(prefix="psmm-tests-")
        _made_here.append(os.environ[SHARED_RUN_DIR_VARIABLE])
    shared_run_dir = os.environ[SHARED_RUN_DIR_VARIABLE]
    # Read by JAX when it is imported (psmm_tf.testing imports it) and by the children.
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                          os.path.join(shared_run_dir, "jax_compilation_cache"))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

    from psmm_tf import testing

    testing.use_native_test_cache()
    testing.SHARED_RUN_DIR = shared_run_dir


def pytest_unconfigure(config):
    del config
    for folder in _made_here:
        shutil.rmtree(folder, ignore_errors=True)
