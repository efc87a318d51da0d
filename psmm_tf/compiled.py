"""Inference functions compiled on the current Keras backend (`tf.function` or `jax.jit`).

The layers and models are written with `keras.ops` only; running one of their methods as a
compiled graph is the one thing that differs between backends: `tf.function` on TensorFlow,
`jax.jit` over the variables' values on JAX (a jitted closure would bake the weights in as
constants), eager elsewhere. `graph_function` is the package's one way to make a TensorFlow graph
of its own code.
"""

import keras


def inference_function(model, function, jit_compile=False):
    """`function(*args)`, compiled, reading `model`'s current variables at every call.

    Args:
        model: the `keras.Model` whose variables `function` reads (not writes).
        function: a Python function of tensors (nested structures allowed) built from the
            model's calls.
        jit_compile: bool. On TensorFlow, XLA-compile the graph (`jax.jit` always does).

    Returns:
        A callable with `function`'s arguments and results.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return graph_function(function, reduce_retracing=True, jit_compile=jit_compile)
    if backend == "jax":
        import jax

        def pure(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(model.variables, values))):
                return function(*args)

        jitted = jax.jit(pure)
        return lambda *args: jitted([variable.value for variable in model.variables], *args)
    return function


def is_traced(value):
    """Whether `value` is a tensor being traced (inside a `tf.function` or under `jax.jit`):
    its shape and dtype are known, its values not yet."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.is_symbolic_tensor(value)
    if backend == "jax":
        import jax

        return isinstance(value, jax.core.Tracer)
    return False


def graph_function(function=None, **options):
    """`tf.function(function, autograph=False, **options)`; without `function`, a decorator.

    psmm_tf's code has no Python control flow on tensors (its layers also run under `jax.jit`,
    which converts none), so it is traced as written: AutoGraph's conversion of every function a
    step calls, most of the first trace's time in each new process, is skipped, and a Python
    `if` on a tensor fails loudly while tracing.
    """
    import tensorflow as tf

    if function is None:
        return lambda decorated: graph_function(decorated, **options)
    return tf.function(function, autograph=False, **options)
