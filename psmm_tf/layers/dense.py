"""`Dense` whose bias gradient is summed in float32 under a bfloat16 policy on TensorFlow, and
`affine`, the `x W + b` of psmm_tf's layers."""

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
    `(B * T, V)` softmax gradient over its rows, learned from a gradient 10% off the float32
    one (and 4% too large along it) at `medium`, and 700 rows of -0.5 summed to -128 instead of
    -350 (docs/results.md, "bfloat16's bias gradient"). The broadcast sum's gradient is a
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
    own, 2.3 ms for `medium`'s `(20, 35, 10000)` bfloat16 logits on the 2-core EPYC of
    docs/results.md ("The update in place, the bias in the product"). The bias is added as a
    tensor's `+` (TensorFlow's AddV2, not `BiasAdd`, whose bfloat16 gradient is summed in
    bfloat16; see `Dense`). Other backends take `ops.matmul` as it is (XLA fuses the sum).

    Args:
        inputs: float `(..., in)`.
        kernel: `(in, out)`.
        bias: optional `(out,)`.

    Returns:
        `(..., out)` in the dtype of `inputs W`.
    """
    if keras.backend.backend() == "tensorflow" and len(inputs.shape) > 2:
        import tensorflow as tf

        leading = tf.shape(inputs)[:-1]
        flat = affine(tf.reshape(inputs, [-1, inputs.shape[-1]]), kernel, bias)
        outputs = tf.reshape(flat, tf.concat([leading, tf.shape(flat)[-1:]], axis=0))
        # The static shape, where the reshape's shape tensor hides it.
        return tf.ensure_shape(outputs, inputs.shape[:-1] + flat.shape[-1:])
    outputs = ops.matmul(inputs, kernel)
    if bias is not None:
        # A tensor's `+`: TensorFlow's AddV2, not ops.add's BiasAdd (see `Dense`).
        outputs = outputs + ops.convert_to_tensor(bias, dtype=outputs.dtype)
    return outputs
