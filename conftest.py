"""pytest: the native kernels of every test process build into the tests' own cache folder
(`psmm_tf.testing.NATIVE_TEST_CACHE`), never into a user's ~/.cache/psmm_tf; the processes of
one run (pytest-xdist's workers) share one temporary folder (`psmm_tf.testing.SHARED_RUN_DIR`)
for what the tests make once, removed by the run's first process at its end. On Keras' JAX
backend each process also takes `psmm_tf.testing.jax_test_settings()` (JAX's persistent
compilation cache in that folder, XLA's optimisation passes off), as the tests' JAX children do
(docs/design_notes.md, "How the tests stay cheap")."""

import os
import shutil
import tempfile

# The shared folder's path, from the run's first process to the workers it starts.
SHARED_RUN_DIR_VARIABLE = "PSMM_TF_TEST_SHARED_RUN_DIR"
_made_here = []


def pytest_configure(config):
    del config
    import keras

    from psmm_tf import testing

    testing.use_native_test_cache()
    testing.use_xla_test_flags()
    if SHARED_RUN_DIR_VARIABLE not in os.environ:
        os.environ[SHARED_RUN_DIR_VARIABLE] = tempfile.mkdtemp(prefix="psmm-tests-")
        _made_here.append(os.environ[SHARED_RUN_DIR_VARIABLE])
    testing.SHARED_RUN_DIR = os.environ[SHARED_RUN_DIR_VARIABLE]
    if keras.backend.backend() == "jax":
        import jax

        for option, value in testing.jax_test_settings().items():
            jax.config.update(option, value)


def pytest_unconfigure(config):
    del config
    for folder in _made_here:
        shutil.rmtree(folder, ignore_errors=True)
