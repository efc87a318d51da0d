"""`Dense` whose bias gradient is summed in float32 under a bfloat16 policy on TensorFlow;
`affine`, the `x W + b` of psmm_tf's layers; and `weight_gradient`, the `X^T dY` of their
kernels."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="psmm_tf")
class Dense(keras.layers.Dense):
    """`keras.layers.Dense` (same arguments, weights and outputs), its bias added as a plain
    broadcast sum.

    Keras' TensorFlow backend adds a dense layer's bias with `tf.nn.bias_add`, and TensorFlow's
    CPU gradient of that op (`BiasAddGrad`) sums a bfloat16 gradient over the rows in
    bfloat16: past 256 in magnitude the sum moves in steps of 2 or more, so terms under a step
    are lost. A `mixed_bfloat16` language model's output bias, whose gradient sums the
    `(B * T, V)` softmax gradient over its rows, would learn word frequencies from a sum that
    dropped the small probabilities every row gives a frequent word (docs/design_notes.md,
    "Every sum over rows of a 16-bit gradient"). The broadcast sum's gradient is a
    `reduce_sum`, which sums in float32. Float32, float16 and the JAX backend give the same
    numbers either way.

    Call arguments:
        inputs: float `(..., input_dim)`.

    Returns:
        `(..., units)`, as `keras.layers.Dense`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.layers import Dense

    layer = Dense(4, dtype="mixed_bfloat16")
    outputs = layer(np.ones((2, 3, 8), "float32"))   # bfloat16 (2, 3, 4)
    ```
    """

    def call(self, inputs, training=None):
        # (Quantized layers call `quantized_call`, not this; `kernel` applies LoRA.)
        outputs = affine(inputs, self.kernel, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs


def affine(inputs, kernel, bias=None):
    """`inputs W + b` over the last axis.

    On TensorFlow the inputs are flattened to one 2-D product and the bias added to it, which
    TensorFlow's graph optimizer fuses into the product (oneDNN's bias post-op): a product of
    3-D inputs is a batched product, and the bias added to its output a broadcast pass of its
    own (docs/design_notes.md,
    "An embedding's gradient stays its rows; the bias goes into the product"). The bias is
    added as a tensor's `+` (TensorFlow's AddV2, not `BiasAdd`, whose bfloat16 gradient is
    summed in bfloat16; see `Dense`). Other backends take the product as it is (XLA fuses the
    sum); on JAX with the kernel's gradient as `(dY^T X)^T` (`product_jax`).

    Args:
        inputs: float `(..., in)`.
        kernel: `(in, out)`.
        bias: optional `(out,)`.

    Returns:
        `(..., out)` in the dtype of `inputs W`.

    On TensorFlow the kernel's gradient is `weight_gradient`'s (the faster form of the same
    product under bfloat16).
    """
    if keras.backend.backend() == "tensorflow" and len(inputs.shape) > 2:
        import tensorflow as tf

        leading = tf.shape(inputs)[:-1]
        flat = affine(tf.reshape(inputs, [-1, inputs.shape[-1]]), kernel, bias)
        outputs = tf.reshape(flat, tf.concat([leading, tf.shape(flat)[-1:]], axis=0))
        # The static shape, where the reshape's shape tensor hides it.
        return tf.ensure_shape(outputs, inputs.shape[:-1] + flat.shape[-1:])
    if keras.backend.backend() == "tensorflow" and _transposed_form(kernel.dtype):
        outputs = _product_with_weight_gradient(inputs, kernel)
    elif keras.backend.backend() == "jax":
        from psmm_tf.layers.product_jax import product

        outputs = product(inputs, ops.convert_to_tensor(kernel))
    else:
        outputs = ops.matmul(inputs, kernel)
    if bias is not None:
        # A tensor's `+`: TensorFlow's AddV2, not ops.add's BiasAdd (see `Dense`).
        outputs = outputs + ops.convert_to_tensor(bias, dtype=outputs.dtype)
    return outputs


def weight_gradient(inputs, grad_outputs):
    """`X^T dY`, the gradient of the kernel of `Y = X W`, on TensorFlow.

    oneDNN's bfloat16 product of this form, whose sum runs over the rows of both, is slow on
    a CPU with bfloat16 products (the AVX512-BF16 EPYC of docs/experiments/2026-log.md,
    "The weights' gradients in the faster form"), where the transpose of `dY^T X`, the transpose
    included, was the faster form for the vocabulary head's and the LSTM kernels' gradients.
    So in bfloat16, on such a CPU, it is taken as the transpose of
    `dY^T X`. Elsewhere, and in other dtypes, it is `X^T dY`, as TensorFlow's own gradient of
    the product takes it; the two differ by float rounding.

    Args:
        inputs: `(N, in)` `X`.
        grad_outputs: `(N, out)` `dY`, in `inputs`' dtype.

    Returns:
        `(in, out)`, in `inputs`' dtype.
    """
    import tensorflow as tf

    if _transposed_form(inputs.dtype):
        return tf.transpose(tf.matmul(grad_outputs, inputs, transpose_a=True))
    return tf.matmul(inputs, grad_outputs, transpose_a=True)


def _transposed_form(dtype):
    """Whether `weight_gradient` takes `(dY^T X)^T` for `dtype`: bfloat16 on a CPU with
    bfloat16 products (AVX512-BF16 or AMX), where it was measured. (Without them oneDNN has no
    bfloat16 product; a GPU's products take either form.)"""
    import tensorflow as tf

    return (tf.as_dtype(dtype) == tf.bfloat16 and _cpu_has_bfloat16_products()
            and not tf.config.list_logical_devices("GPU"))


def _cpu_has_bfloat16_products():
    from psmm_tf import native

    return bool(native.cpu_flags() & {"avx512_bf16", "amx_bf16"})


def _product_with_weight_gradient(inputs, kernel):
    """`X W` for 2-D `X` on TensorFlow, the kernel's gradient `weight_gradient`'s, the inputs'
    `dY W^T` (TensorFlow's own)."""
    import tensorflow as tf

    @tf.custom_gradient
    def product(inputs, kernel):
        def backward(grad_outputs):
            return (tf.matmul(grad_outputs, kernel, transpose_b=True),
                    weight_gradient(inputs, grad_outputs))

        return tf.matmul(inputs, kernel), backward

    # A variable's (autocast) read as a tensor: the gradient reaches the variable through it.
    return product(tf.convert_to_tensor(inputs), tf.convert_to_tensor(kernel))
