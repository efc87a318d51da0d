"""`Dense` whose bias gradient is summed in float32 under a bfloat16 policy on TensorFlow."""

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
        outputs = ops.matmul(inputs, self.kernel)
        if self.bias is not None:
            # A tensor's `+`: TensorFlow's AddV2, not ops.add's BiasAdd (see above).
            outputs = outputs + ops.convert_to_tensor(self.bias, dtype=outputs.dtype)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs
