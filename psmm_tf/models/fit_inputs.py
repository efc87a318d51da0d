"""The inputs of `fit` and `evaluate` checked before a compiled step (where a bad value cannot
raise), and the targets and weights of a batch: helpers of `RecurrentCausalLM`
(psmm_tf/models/causal_lm.py)."""

import keras
import numpy as np
from keras import ops

from psmm_tf.models.inputs import validate_inputs


def as_array_if_list_of_ids(x):
    """A Python list of ids as a NumPy array (checked like one); other inputs unchanged."""
    if isinstance(x, (list, tuple)) and not any(isinstance(v, (str, bytes)) for v in x):
        try:
            return np.asarray(x)
        except ValueError:  # ragged rows: the Keras adapter names them
            return x
    return x


def check_id_arrays(model, x, y, sample_weight=None):
    """Checks arrays given to `fit`/`evaluate` before a compiled step, where a bad value cannot
    raise: ids and targets (`validate_inputs`; floats must hold whole numbers), the weights
    (finite, >= 0) and that strings are not an empty batch. Datasets are left to the pipeline
    that made them."""
    if _is_empty(x):
        raise ValueError("x is empty (no text and no ids): expected strings, token ids "
                         "(batch_size, T) or a dataset with at least one row.")
    _check_sample_weight(sample_weight)
    if sample_weight is not None and holds_texts(x) and np.ndim(sample_weight) != 1:
        raise ValueError(f"`sample_weight` with texts must hold one weight per text, shape "
                         f"(batch_size,); got shape {np.shape(sample_weight)}.")
    mask = None
    if isinstance(x, dict) and "token_ids" in x:
        x, mask = x["token_ids"], x.get("padding_mask")
    if not _is_numeric_array(x) or not (y is None or _is_numeric_array(y)):
        return
    if y is None:
        raise ValueError("fit/evaluate on token ids need targets: give y (the next token of "
                         "each input token, (batch_size, T)), or give strings.")
    x = _whole_ids("token_ids", x, model.vocab_size)
    y = _whole_ids("target_ids", y, model.vocab_size)
    validate_inputs(model, x, target_ids=y, padding_mask=mask)


def holds_texts(x):
    if isinstance(x, str) or (isinstance(x, (list, tuple)) and x
                              and all(isinstance(v, str) for v in x)):
        return True
    return hasattr(x, "dtype") and not _is_numeric_array(x) and not isinstance(x, dict)


def _is_empty(x):
    shape = getattr(x, "shape", None)
    if isinstance(x, (list, tuple)):
        return len(x) == 0
    return shape is not None and len(shape) > 0 and 0 in tuple(shape)


def _whole_ids(name, ids, vocab_size):
    """Float ids holding whole numbers in `[0, vocab_size)` as int64; other floats refused."""
    array = np.asarray(ids)
    if array.dtype.kind != "f":
        return array
    whole = np.isfinite(array) & (array == np.round(array))
    if not whole.all():
        raise ValueError(f"`{name}` holds {float(array[~whole].flat[0])}: expected integer ids "
                         f"(whole numbers) in the vocabulary [0, {vocab_size}).")
    outside = (array < 0) | (array >= vocab_size)
    if outside.any():  # checked as floats: a cast would wrap 1e30
        value = float(array[outside].flat[0])
        raise ValueError(f"`{name}` holds the id {int(value) if abs(value) < 2**63 else value}"
                         f", outside the vocabulary [0, {vocab_size}).")
    return array.astype(np.int64)


def _check_sample_weight(sample_weight):
    if sample_weight is None:
        return
    try:
        weights = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`sample_weight` must be numbers, (batch_size,) or (batch_size, T); "
                         f"got {type(sample_weight).__name__}.") from None
    bad = ~np.isfinite(weights) | (weights < 0)
    if bad.any():
        raise ValueError(f"`sample_weight` holds {float(weights[bad].flat[0])} at index "
                         f"{tuple(int(i) for i in np.argwhere(bad)[0])}: expected finite "
                         "weights >= 0.")


def _is_numeric_array(value):
    """Whether `value` is an array or tensor of numbers (not strings)."""
    if not hasattr(value, "shape") or getattr(value, "dtype", None) is None:
        return False
    try:
        name = keras.backend.standardize_dtype(value.dtype)
    except (TypeError, ValueError):  # NumPy strings, objects
        return False
    return name == "bool" or name.startswith(("int", "uint", "float", "bfloat"))


def fit_targets(x, y, sample_weight):
    """The targets `(batch_size, T)` and their weights of a `fit`/`evaluate` batch.

    `y` holds the targets; the weights are `sample_weight`, else the input dict's
    `padding_mask`, else 1.
    """
    if y is None:
        raise ValueError("fit/evaluate need targets: give y (the next token of each input "
                         "token) or strings through the preprocessor.")
    if sample_weight is None and isinstance(x, dict) and "padding_mask" in x:
        sample_weight = x["padding_mask"]
    if sample_weight is None:
        sample_weight = ops.ones(ops.shape(y), "float32")
    return ops.cast(y, "int32"), ops.cast(sample_weight, "float32")
