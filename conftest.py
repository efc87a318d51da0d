"""pytest: the native kernels of every test process build into the tests' own cache folder
(`psmm_tf.testing.NATIVE_TEST_CACHE`), never into a user's ~/.cache/psmm_tf."""


def pytest_configure(config):
    del config
    from psmm_tf import testing

    testing.use_native_test_cache()
