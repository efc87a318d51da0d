"""The model kinds: which task class a `ModelConfig.kind` builds.

A task class registers itself with `register_model` and declares, as class attributes:
`kind` (the `ModelConfig.kind` that builds it), `hyperparameters` (its own settings:
`psmm_tf.configs.Hyperparameter`s with their defaults and checks, which its constructor takes
beyond the ones every task takes), `compared_arguments` (those of them a loaded model must
match, read back as attributes) and `head_parameter_count(model_config)` (the trainable weights
it adds to the LSTM language model). `build_model`, the parameter counts, `ModelConfig` (which
reads its kind's hyperparameters as attributes and writes them in config.json) and the
trainers' flags (a `--<name>` flag for each hyperparameter) read this registry, so adding a
model, its settings included, is one new module `psmm_tf/models/<name>_lm.py`
(`psmm_tf.models` imports every such module) and its test.

Example:
```python
import keras
from psmm_tf.configs import Hyperparameter
from psmm_tf.models import LanguageModel, register_model

@register_model
@keras.saving.register_keras_serializable(package="psmm_tf")
class MyLM(LanguageModel):
    kind = "my_lm"
    hyperparameters = (Hyperparameter("my_units", int, 64, "Units of my head.",
                                      accepts=lambda n: n >= 1, expected="an integer >= 1"),)

    def __init__(self, backbone, my_units=64, **kwargs):   # from ModelConfig.my_units
        self.my_units = my_units
        super().__init__(backbone, **kwargs)
```
"""

from psmm_tf import configs

# The model every comparison and report measures a pointer against.
BASELINE_KIND = "lstm"

_CLASSES = {}


def register_model(cls):
    """Class decorator: `cls` is the model of `ModelConfig(kind=cls.kind)`."""
    kind = getattr(cls, "kind", None)
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"{cls.__name__} declares no model kind (a class attribute `kind`).")
    registered = _CLASSES.get(kind)
    if registered is not None and registered.__qualname__ != cls.__qualname__:
        raise ValueError(f"Model kind {kind!r} is taken by {registered.__name__}; "
                         f"{cls.__name__} needs another.")
    configs.declare_hyperparameters(kind, tuple(getattr(cls, "hyperparameters", ())))
    _CLASSES[kind] = cls
    return cls


def unregister_model(kind):
    """Forgets model kind `kind` and its hyperparameters (a model registered for a while)."""
    _CLASSES.pop(kind, None)
    configs.forget_hyperparameters(kind)


def model_kinds():
    """The registered kinds, in the order their modules were imported (`lstm` among them).

    Importing this module imports `psmm_tf.models`, which imports every task module first.
    """
    return tuple(_CLASSES)


def model_class(kind):
    """The task class registered as `kind`.

    Raises:
        ValueError: no model has that kind (the message lists the kinds).
    """
    if kind not in _CLASSES:
        raise ValueError(f"model kind must be one of {tuple(_CLASSES)}, got {kind!r}.")
    return _CLASSES[kind]
