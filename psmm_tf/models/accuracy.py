"""The tasks' default accuracy metric: Keras' `SparseCategoricalAccuracy`, its argmax taken
on JAX as two plain maxima.

XLA's CPU backend runs `argmax` (a reduction over value-index pairs) as a scalar loop: over
the `(B, T, V)` log-probabilities of a `small` fit step it was the step's largest
non-product pass, where a plain maximum over the same tensor runs vectorised (docs/results.md,
"TensorFlow and JAX backends"). The target is the argmax exactly when its entry is the row's
maximum and no entry before it reaches that value (argmax takes the first of equal maxima).
"""

import keras
from keras import ops


def sparse_categorical_accuracy(y_true, y_pred):
    """1.0 where `argmax(y_pred) == y_true`, else 0.0: Keras' `sparse_categorical_accuracy`.

    Args:
        y_true: ids `(...)` or `(..., 1)`, int or float holding whole numbers.
        y_pred: float `(..., V)`.

    Returns:
        `(...)` in Keras' floatx. On JAX from two maxima (the module docstring); elsewhere
        Keras' own function.
    """
    if keras.backend.backend() != "jax":
        return keras.metrics.sparse_categorical_accuracy(y_true, y_pred)
    y_pred = ops.convert_to_tensor(y_pred)
    y_true = ops.convert_to_tensor(y_true)
    if len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == 1:
        y_true = ops.squeeze(y_true, -1)
    targets = ops.cast(y_true, "int32")[..., None]
    target_value = ops.take_along_axis(y_pred, targets, axis=-1)
    before = ops.arange(ops.shape(y_pred)[-1], dtype="int32") < targets
    earlier_max = ops.max(ops.where(before, y_pred, float("-inf")), axis=-1, keepdims=True)
    is_first_max = ops.logical_and(ops.max(y_pred, axis=-1, keepdims=True) <= target_value,
                                   earlier_max < target_value)
    return ops.cast(is_first_max[..., 0], keras.backend.floatx())


@keras.saving.register_keras_serializable(package="psmm_tf")
class SparseCategoricalAccuracy(keras.metrics.SparseCategoricalAccuracy):
    """`keras.metrics.SparseCategoricalAccuracy` (same arguments and values) computed with
    `sparse_categorical_accuracy` above.

    Example:
    ```python
    import numpy as np
    from psmm_tf.models.accuracy import SparseCategoricalAccuracy

    metric = SparseCategoricalAccuracy(name="accuracy")
    metric.update_state(np.array([1, 0]), np.array([[0.1, 0.9], [0.6, 0.4]]))
    float(metric.result())   # 1.0
    ```
    """

    def __init__(self, name="sparse_categorical_accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self._fn = sparse_categorical_accuracy
