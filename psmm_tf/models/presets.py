"""Reading models back: `.keras` files, preset folders in keras-hub's layout and psmm-train run
folders (which hold a `model.keras`).

`RecurrentCausalLM.from_preset` and `save_to_preset` (psmm_tf/models/causal_lm.py) are keras-hub's
entry points; this module holds what they share with the rest of the package: the one reader of
`.keras` files (`read_model_file`), the rebuild of a model under another dtype policy or with new
weights (`rebuild_model`), and the checks that name a preset path and what a preset holds.
"""

import errno
import importlib.metadata
import json
import os
import tempfile
import zipfile

import keras
import keras_hub
from keras import ops
from keras_hub.src.utils import preset_utils

from psmm_tf.models.backbone import LSTMBackbone, preset_dtype, refuse_existing_files

# A preset folder is keras-hub's layout (`save_to_preset`), its names keras-hub's; a psmm-train
# run folder (`psmm_tf.workdir`) holding the model's `.keras` file loads as a preset too.
MODEL_FILE = "model.keras"
PRESET_CONFIG_FILE = preset_utils.CONFIG_FILE
PRESET_METADATA_FILE = preset_utils.METADATA_FILE
# Every file `save_to_preset` may write (and never replaces), `MODEL_FILE` included: a folder
# holding one is some other preset or run.
PRESET_FILES = (PRESET_CONFIG_FILE, PRESET_METADATA_FILE, preset_utils.TASK_CONFIG_FILE,
                preset_utils.TASK_WEIGHTS_FILE, preset_utils.MODEL_WEIGHTS_FILE,
                preset_utils.SHARDED_MODEL_WEIGHTS_CONFIG_FILE,
                preset_utils.PREPROCESSOR_CONFIG_FILE, preset_utils.TOKENIZER_CONFIG_FILE,
                preset_utils.ASSET_DIR, MODEL_FILE)
# What `from_preset` and the errors about presets say a preset is.
PRESET_DESCRIPTION = (f"a preset is a folder holding {PRESET_CONFIG_FILE} (written by "
                      f"save_to_preset) or {MODEL_FILE} (a psmm-train run folder), or a .keras "
                      "file")
# The errors of a write that found the disk (or the quota) full.
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


# The bases of every language model `read_model_file` returns (LanguageModel and
# InputOutputGateLM share ScoringMixin).
_LANGUAGE_MODEL_BASES = {("psmm_tf.models.language_model", "ScoringMixin"),
                         ("psmm_tf.models.char_output_lm", "CharacterOutputLM")}


def read_model_file(path, error=ValueError, advice=""):
    """The model in the `.keras` file `path`: the package's one reader of `.keras` files.

    Raises:
        `error`: the file is truncated, damaged or not a `.keras` file, or holds a model that is
            not one of the package's (a plain Keras model); the message names it and ends with
            `advice`.
        OSError: the disk is full (ENOSPC, EDQUOT, EFBIG): reading a `.keras` file unpacks it
            into the temporary folder (the error's `filename`); the message says so.
    """
    try:  # psmm_tf.models, imported before this module, registers the classes
        model = keras.saving.load_model(path)
    except (ValueError, TypeError, KeyError, OSError, zipfile.BadZipFile) as err:
        if isinstance(err, OSError) and err.errno in _DISK_FULL_ERRNOS:
            raise OSError(err.errno, f"out of disk space ({err.strerror}) unpacking {path} "
                          "to read it: free space in the temporary folder, or set TMPDIR to a "
                          "folder with room", tempfile.gettempdir()) from None
        raise error(f"{path} cannot be read as a .keras model (truncated, damaged or another "
                    f"format: {str(err).splitlines()[0][:200]}).{advice}") from None
    # isinstance of the package's language models (a user's subclass too), by name: their
    # modules import this one.
    if not any((cls.__module__, cls.__qualname__) in _LANGUAGE_MODEL_BASES
               for cls in type(model).__mro__):
        raise error(f"{path} holds a {type(model).__name__}, not a psmm_tf language model (a "
                    f"psmm-train run's model.keras, or a model of psmm_tf.models saved with "
                    f"model.save).{advice}")
    return model


def holds_keras_hub_config(path):
    """Whether the folder `path` is for keras-hub's loader: it holds a `config.json` that is not
    a psmm-train run's config beside the run's `model.keras` (a run folder has both files; its
    config.json is the run's settings, not a serialized Keras object)."""
    config_path = os.path.join(path, PRESET_CONFIG_FILE)
    if not os.path.isfile(config_path):
        return False
    if not os.path.isfile(os.path.join(path, MODEL_FILE)):
        return True
    try:
        with open(config_path, encoding="utf-8") as file:
            config = json.load(file)
    except (OSError, ValueError):
        return False  # not keras-hub's either: the folder's model.keras is the preset
    # keras-hub's config.json is `keras.saving.serialize_keras_object`'s: a class and its config.
    return isinstance(config, dict) and {"class_name", "config"} <= set(config)


def check_preset_class(model, cls, path):
    if not isinstance(model, cls):
        raise ValueError(f"preset {path!r} holds a {type(model).__name__}, not a "
                         f"{cls.__name__}.")


def task_on_backbone_preset(cls, path, load_weights, dtype=None, **kwargs):
    """A new `cls` task (its head initialised, `kwargs` its arguments: `window_size`, ...) on
    the backbone (and, where the preset has one, the preprocessor) of a preset without a task,
    as keras-hub builds a task on a backbone's preset."""
    if getattr(cls, "kind", None) is None:  # RecurrentCausalLM, LanguageModel: no head
        raise ValueError(
            f"preset {path!r} holds a backbone and no task ({preset_utils.TASK_CONFIG_FILE}): "
            f"keras_hub.models.CausalLM cannot tell which head to put on it; load it with the "
            f"task's class, e.g. psmm_tf.models.PointerSentinelLM.from_preset({path!r}, "
            f"window_size=100) or LSTMLanguageModel.from_preset({path!r}).")
    backbone = keras_hub.models.Backbone.from_preset(path, load_weights=load_weights,
                                                     dtype=preset_dtype(path, dtype, load_weights))
    if not isinstance(backbone, LSTMBackbone):
        raise ValueError(f"preset {path!r} holds a {type(backbone).__name__}, not an "
                         f"LSTMBackbone: {cls.__name__} reads an LSTMBackbone's states.")
    if "preprocessor" not in kwargs and preset_utils.check_file_exists(
            path, preset_utils.PREPROCESSOR_CONFIG_FILE):
        kwargs["preprocessor"] = keras_hub.models.CausalLMPreprocessor.from_preset(path)
    return cls(backbone=backbone, **kwargs)


def model_file_preset(path, cls, load_weights=True, dtype=None, **kwargs):
    """The `cls` model of a `model.keras` preset (a run folder, an earlier `save_to_preset`, a
    `.keras` file), rebuilt under `dtype` and with new weights where asked."""
    if kwargs:
        raise ValueError(f"from_preset({path!r}, {', '.join(f'{k}=' for k in kwargs)}...): a "
                         f"{MODEL_FILE} preset takes load_weights and dtype only.")
    model = read_model_file(preset_model_file(path), advice=f" (preset {path!r})")
    check_preset_class(model, cls, path)
    if load_weights and dtype is None:
        return model
    return rebuild_model(model, dtype, load_weights)


def rebuild_model(model, dtype=None, load_weights=True):
    """`model` built again from its config under the Keras dtype policy `dtype` (None: its
    own), with its weights (cast to the new variables' dtype) unless `load_weights` is False.

    E.g. a run trained under `mixed_bfloat16` scored in float32: its variables are float32
    under either policy, so only the computation changes.
    """
    quantized = [layer.name for layer in model._flatten_layers() if layer.quantization_mode]
    if quantized and (dtype is not None or not load_weights):
        raise ValueError(
            f"{type(model).__name__} is quantized ({', '.join(quantized)}): it is rebuilt only "
            f"as it is, not under another dtype (dtype={dtype!r}) or with new weights "
            f"(load_weights={load_weights}); use the float model it was quantized from.")
    config = model.get_config()
    if dtype is not None:
        if "backbone" not in config:
            raise ValueError(f"dtype={dtype!r}: a {type(model).__name__} computes under its base "
                             "model's dtype policy; a model with a backbone was expected.")
        backbone = dict(config["backbone"])
        backbone["config"] = dict(backbone["config"], dtype=dtype)
        config["backbone"] = backbone
    new_model = type(model).from_config(dict(config, preprocessor=model.preprocessor))
    if load_weights:
        for new, old in zip(new_model.weights, model.weights, strict=True):
            new.assign(ops.cast(old, new.dtype))
    return new_model


def preset_model_file(path):
    """The `.keras` file a local preset `path` names; ValueError naming `path` otherwise."""
    try:
        os.stat(path)
    except OSError as err:
        what = ("is a symlink loop" if err.errno == errno.ELOOP else
                "does not exist" if err.errno == errno.ENOENT else
                f"cannot be read ({err.strerror})")
        raise ValueError(f"preset {path!r} {what}: {PRESET_DESCRIPTION}.") from None
    if os.path.isdir(path):
        model_file = os.path.join(path, MODEL_FILE)
        if not os.path.isfile(model_file):
            raise ValueError(f"preset {path!r} holds no {PRESET_CONFIG_FILE} and no "
                             f"{MODEL_FILE}: {PRESET_DESCRIPTION}.")
        return model_file
    if not path.endswith(".keras"):
        raise ValueError(f"preset {path!r} is a file, not a preset folder or a .keras file: "
                         f"{PRESET_DESCRIPTION}.")
    return path


def check_new_preset_folder(path):
    """Refuses a `save_to_preset` folder that would replace a file, before anything is written.

    Raises:
        ValueError: `path` names a `.keras` file (a preset is a folder; one file is
            `model.save(path)`).
        FileExistsError: `path` is a file, or holds a file a preset is made of.
    """
    if path.endswith(".keras"):
        raise ValueError(f"save_to_preset({path!r}): a preset is a folder (of "
                         f"{PRESET_CONFIG_FILE}, weights and {PRESET_METADATA_FILE}), not a "
                         f".keras file; to write one .keras file use model.save({path!r}).")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise FileExistsError(f"save_to_preset: {path} exists and is not a folder; give an "
                              "empty or new folder.")
    refuse_existing_files(path, PRESET_FILES)


def add_psmm_tf_metadata(path, class_name):
    """Adds the task's class and the package's version to keras-hub's `metadata.json` in the
    preset folder `path`."""
    metadata_file = os.path.join(path, PRESET_METADATA_FILE)
    with open(metadata_file) as f:
        metadata = json.load(f)
    metadata.update(class_name=class_name, psmm_tf_version=importlib.metadata.version("psmm_tf"))
    with open(metadata_file, "w") as f:
        json.dump(metadata, f, indent=4)
