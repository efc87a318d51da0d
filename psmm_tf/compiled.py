"""Inference functions compiled on the current Keras backend (`tf.function` or `jax.jit`).

The layers and models are written with `keras.ops` only; running one of their methods as a
compiled graph is the one thing that differs between backends: `tf.function` on TensorFlow,
`jax.jit` over the variables' values on JAX (a jitted closure would bake the weights in as
constants), eager elsewhere.
"""

import keras


def inference_function(model, function):
    """`function(*args)`, compiled, reading `model`'s current variables at every call.

    Args:
        model: the `keras.Model` whose variables `function` reads (not writes).
        function: a Python function of tensors (nested structures allowed) built from the
            model's calls.

    Returns:
        A callable with `function`'s arguments and results.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function, reduce_retracing=True)
    if backend == "jax":
        import jax

        def pure(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(model.variables, values))):
                return function(*args)

        jitted = jax.jit(pure)
        return lambda *args: jitted([variable.value for variable in model.variables], *args)
    return function
