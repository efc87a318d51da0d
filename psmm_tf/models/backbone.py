"""The recurrent component: embedding, a stack of zoneout LSTMs and locked dropout."""

import json
import os

import keras
import keras_hub
from keras import ops
from keras_hub.src.utils import preset_utils

from psmm_tf.configs import INPUT_EMBEDDINGS
from psmm_tf.layers import CharacterEmbedding, LockedDropout, ZoneoutLSTM, checked_ids


@keras.saving.register_keras_serializable(package="psmm_tf")
class LSTMBackbone(keras_hub.models.Backbone):
    """Embedding + `num_layers` LSTM layers with variational dropout and zoneout.

    The backbone of every language-model task of the package: a keras-hub `Backbone` (a
    subclassed one: its call takes and returns the carried LSTM state), given to the tasks,
    which add their own head, output dropout included. Locked
    dropout is applied to the input of every layer (`input_dropout` on the embedding,
    `hidden_dropout` between layers) and zoneout to every layer's recurrent state, as in the
    paper's regularised LSTM (section 5.2). All of it is active only in training.

    Args:
        vocab_size: int. Number of token ids.
        embedding_dim: int. Width of the word embedding.
        hidden_dim: int. Units of every LSTM layer (the output size D).
        num_layers: int. Number of LSTM layers.
        input_dropout, hidden_dropout: floats in [0, 1).
        zoneout: float in [0, 1). Zoneout probability of every layer's state.
        seed: optional int. Base seed of the initialisers and random masks.
        init_scale: optional float > 0. None: Keras' initialisers (embedding uniform in
            [-0.1, 0.1], Glorot kernels, orthogonal recurrent kernels, forget-gate bias 1). A
            value `s`: every weight uniform in `[-s, s]` and every bias 0 (Zaremba et al. 2014:
            0.1 small, 0.05 medium, 0.04 large); the tasks' vocabulary head follows it.
        input_embedding: "ids" (a table of `vocab_size x embedding_dim` weights) or "chars"
            (`CharacterEmbedding`: the character CNN of each word's spelling, Jozefowicz et
            al.'s "CNN inputs"; the task's `set_vocabulary` spells the vocabulary, and
            `token_chars` spells the words the ids hold as `<unk>`). The character CNN keeps
            Glorot initialisers (seeded from `seed`) whatever `init_scale` says
            (docs/results.md, "Character-CNN word inputs").
        max_word_length: int. Characters kept per word with "chars", markers included.
        dtype: optional Keras dtype policy (e.g. "mixed_bfloat16"), of the backbone, every
            layer in it and the task's head; None: the global policy. The carried state has
            its compute dtype.

    Call arguments:
        token_ids: int `(batch_size, T)` in `[0, vocab_size)`: checked in eager calls, not
            inside compiled functions (validate ids where they enter: the data pipeline, the
            serving signatures, `psmm_tf.models.validate_inputs`). Or keras-hub's backbone
            inputs, a dict of `token_ids` and `padding_mask` (bool, or numbers: nonzero is a
            token), the mask taken as `token_mask`.
        initial_state: optional tuple of `num_layers` pairs `(h, c)`, each `(batch_size, H)`.
        token_mask: optional bool `(batch_size, T)`; False positions leave the state unchanged.
        training: bool.
        state_index: optional static int; the returned state is the one after that step.
        token_chars: optional int `(batch_size, T, max_word_length)` with "chars": the
            spelling of each position (`psmm_tf.layers.char_cnn.word_characters` rows).

    Returns:
        `(hidden, state)`: the last layer's outputs `(batch_size, T, hidden_dim)` (no dropout on
        them: each task applies its own), and the tuple of per-layer `(h, c)` after step
        `state_index` (default: last).

    Example:
    ```python
    import numpy as np
    from psmm_tf.models import LSTMBackbone, PointerSentinelLM

    # The paper's PTB network is vocab_size=10000, embedding_dim=650, hidden_dim=650.
    backbone = LSTMBackbone(vocab_size=1000, embedding_dim=64, hidden_dim=64, num_layers=2,
                            input_dropout=0.5, hidden_dropout=0.5, zoneout=0.1, seed=1)
    model = PointerSentinelLM(backbone, window_size=100)
    ```
    """

    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_layers, input_dropout=0.0,
                 hidden_dropout=0.0, zoneout=0.0, seed=None, init_scale=None,
                 input_embedding="ids", max_word_length=24, **kwargs):
        check_subclassed(type(self))
        super().__init__(**kwargs)
        if init_scale is not None and not 0.0 < init_scale < float("inf"):
            raise ValueError(f"init_scale must be a finite number > 0 or None, got "
                             f"{init_scale!r}.")
        if input_embedding not in INPUT_EMBEDDINGS:
            raise ValueError(f"input_embedding must be one of {INPUT_EMBEDDINGS}, got "
                             f"{input_embedding!r}.")
        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.num_layers = num_layers
        self.input_dropout = input_dropout
        self.hidden_dropout = hidden_dropout
        self.zoneout = zoneout
        self.seed = seed
        self.init_scale = init_scale
        self.input_embedding = input_embedding
        self.max_word_length = max_word_length

        def sub_seed(offset):
            return None if seed is None else seed + offset

        def uniform(default_init, offset):
            if init_scale is None:
                return default_init(seed=sub_seed(offset))
            return keras.initializers.RandomUniform(-init_scale, init_scale, seed=sub_seed(offset))

        # Every layer computes under the backbone's policy, also when it is rebuilt from a
        # config under another global policy.
        policy = self.dtype_policy
        if input_embedding == "chars":
            self.embedding = CharacterEmbedding(
                vocab_size, embedding_dim, max_word_length=max_word_length,
                seed=sub_seed(50), name="embedding", dtype=policy)
        else:
            self.embedding = keras.layers.Embedding(
                vocab_size, embedding_dim,
                embeddings_initializer=uniform(
                    lambda seed: keras.initializers.RandomUniform(-0.1, 0.1, seed=seed), 0),
                name="embedding", dtype=policy,
            )
        # Each sub-layer is an attribute of its own: TensorFlow's checkpoints do not see layers
        # that Keras 3 keeps in a list, so a checkpoint would miss them and their RNG states.
        for i in range(num_layers):
            setattr(self, f"lstm_{i}", ZoneoutLSTM(
                hidden_dim, zoneout=zoneout, seed=sub_seed(10 + i),
                kernel_initializer=uniform(keras.initializers.GlorotUniform, 20 + i),
                recurrent_initializer=uniform(keras.initializers.Orthogonal, 30 + i),
                unit_forget_bias=init_scale is None,
                name=f"lstm_{i}", dtype=policy,
            ))
            rate = input_dropout if i == 0 else hidden_dropout
            setattr(self, f"locked_dropout_{i}",
                    LockedDropout(rate, seed=sub_seed(40 + i), name=f"locked_dropout_{i}",
                                  dtype=policy))
        # Built now, as keras-hub's backbones are: `Backbone.from_preset` loads weights into it.
        self.build()

    @property
    def token_embedding(self):
        """The word embedding (keras-hub's name for it)."""
        return self.embedding

    @property
    def lstm_layers(self):
        """The LSTM layers, bottom first."""
        return [getattr(self, f"lstm_{i}") for i in range(self.num_layers)]

    @property
    def dropouts(self):
        """Locked dropout on the input of each LSTM layer, bottom first."""
        return [getattr(self, f"locked_dropout_{i}") for i in range(self.num_layers)]

    def build(self, input_shape=None):
        if not self.embedding.built:
            self.embedding.build((None, None))
        input_dim = self.embedding_dim
        for layer, dropout in zip(self.lstm_layers, self.dropouts):
            for sublayer in (dropout, layer):
                if not sublayer.built:
                    sublayer.build((None, None, input_dim))
            input_dim = self.hidden_dim
        self.built = True

    def zero_state(self, batch_size):
        """The all-zero state: a tuple of `num_layers` pairs `(h, c)`."""
        return tuple(layer.zero_state(batch_size) for layer in self.lstm_layers)

    def default_lora_layer_names(self):
        """keras-hub's default LoRA targets are attention projections, which an LSTM has none
        of: no layer is a default target (name one to `enable_lora`)."""
        return []

    def enable_lora(self, rank, target_layer_names=None):
        """keras-hub's `enable_lora`: every weight frozen but LoRA factors of rank `rank` on the
        named layers (the LSTM layers have no LoRA form; the input embedding has).

        Raises:
            ValueError: no named layer supports LoRA (keras-hub would freeze the whole backbone
                and train nothing in it); nothing is changed. A str names one layer.
        """
        supported = [layer.name for layer in self._weighted_layers()
                     if hasattr(layer, "enable_lora")]
        if isinstance(target_layer_names, str):
            target_layer_names = [target_layer_names]
        names = list(target_layer_names or self.default_lora_layer_names())
        if not set(names) & set(supported):
            raise ValueError(f"enable_lora(target_layer_names={target_layer_names!r}): no layer "
                             f"of this LSTMBackbone with LoRA support is named; those that have "
                             f"it: {supported} (its LSTM layers have none).")
        super().enable_lora(rank, target_layer_names=names)

    def save_lora_weights(self, filepath):
        """keras-hub's `.lora.h5` file, which holds `Dense`/`EinsumDense` factors
        (`lora_kernel_a/b`) only.

        Raises:
            ValueError: a LoRA layer of this backbone is the embedding (its factors are
                `lora_embeddings_a/b`); `model.save` and `save_to_preset` keep it (the factors
                merged into the embedding). Nothing is written.
        """
        layers = self._weighted_layers()
        others = [layers[i].name for i in getattr(self, "_lora_enabled_layers", [])
                  if not hasattr(layers[i], "lora_kernel_a")]
        if others:
            raise ValueError(f"save_lora_weights({filepath!r}): keras-hub's .lora.h5 files hold "
                             f"the LoRA factors of Dense layers only, not those of {others}; "
                             "model.save or save_to_preset keeps the adapted model.")
        super().save_lora_weights(filepath)

    def _weighted_layers(self):
        """The layers holding weights, in keras-hub's order (`_lora_enabled_layers` indexes
        them)."""
        return [layer for layer in self._flatten_layers(include_self=False) if layer.weights]

    def set_vocabulary(self, words):
        """Spells the vocabulary (V strings, index = id) for the "chars" input embedding; a
        no-op with "ids"."""
        if self.input_embedding == "chars":
            self.embedding.set_vocabulary(list(words))

    def call(self, token_ids, initial_state=None, token_mask=None, training=False,
             state_index=None, token_chars=None):
        if isinstance(token_ids, dict):  # keras-hub's backbone inputs
            token_ids, token_mask = _keras_hub_inputs(token_ids, token_mask)
        # Checked where the ids are concrete (eager); compiled steps rely on their callers.
        token_ids = checked_ids("token_ids", token_ids, self.vocab_size)
        if initial_state is None:
            initial_state = self.zero_state(ops.shape(token_ids)[0])
        if len(initial_state) != self.num_layers:
            raise ValueError(
                f"initial_state must hold one (h, c) pair per layer ({self.num_layers}), "
                f"got {len(initial_state)}."
            )
        if token_chars is not None and self.input_embedding != "chars":
            raise ValueError("token_chars needs input_embedding='chars'; this backbone embeds "
                             "ids.")
        x = (self.embedding(token_ids, token_chars=token_chars)
             if self.input_embedding == "chars" else self.embedding(token_ids))
        final_state = []
        for layer, dropout, layer_state in zip(self.lstm_layers, self.dropouts, initial_state):
            x = dropout(x, training=training)
            x, layer_state = layer(
                x, initial_state=layer_state, step_mask=token_mask, training=training,
                state_index=state_index,
            )
            final_state.append(layer_state)
        return x, tuple(final_state)

    def __call__(self, *args, **kwargs):
        check_subclassed(type(self))  # else Keras' functional methods fail on it, unnamed
        return super().__call__(*args, **kwargs)

    @classmethod
    def from_preset(cls, preset, load_weights=True, **kwargs):
        """keras-hub's `Backbone.from_preset`, a quantized preset's layers quantized as saved
        (`preset_dtype`)."""
        kwargs["dtype"] = preset_dtype(preset, kwargs.get("dtype"), load_weights)
        return super().from_preset(preset, load_weights=load_weights, **kwargs)

    def load_weights(self, filepath, *args, **kwargs):
        """Keras' `load_weights`. Raises a ValueError naming the loaders to use where the weights
        are a quantized preset's and this backbone was built without its quantized layers (as
        keras-hub 0.32's own `Backbone.from_preset` builds it: it drops the saved policies)."""
        try:
            return super().load_weights(filepath, *args, **kwargs)
        except ValueError as err:
            preset = os.path.dirname(os.fspath(filepath))
            quantized = _quantized_preset_layers(preset)
            if not quantized or any(layer.quantization_mode for layer in self._flatten_layers()):
                raise
            raise ValueError(
                f"preset {preset!r} holds a quantized backbone ({', '.join(quantized)}), built "
                f"here without its quantized layers (keras-hub 0.32's Backbone.from_preset drops "
                f"their saved policies); load it with psmm_tf.models.LSTMBackbone.from_preset"
                f"({preset!r}) or a task's from_preset.") from err

    def save_to_preset(self, preset_dir, max_shard_size=10):
        """keras-hub's `Backbone.save_to_preset`; a mixed policy saved as its variables' float
        dtype (`save_mixed_policy_as_float`), so keras-hub's loaders read the preset.

        Raises:
            FileExistsError: `preset_dir` holds a backbone's preset file (config.json, a psmm-train
                run's among them, metadata.json or the weights), never replaced; nothing is
                written.
        """
        refuse_existing_files(preset_dir, _BACKBONE_PRESET_FILES)
        super().save_to_preset(preset_dir, max_shard_size=max_shard_size)
        save_mixed_policy_as_float(preset_dir)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "embedding_dim": self.embedding_dim,
                "hidden_dim": self.hidden_dim,
                "num_layers": self.num_layers,
                "input_dropout": self.input_dropout,
                "hidden_dropout": self.hidden_dropout,
                "zoneout": self.zoneout,
                "seed": self.seed,
                "init_scale": self.init_scale,
                "input_embedding": self.input_embedding,
                "max_word_length": self.max_word_length,
            }
        )
        return config


def _keras_hub_inputs(inputs, token_mask):
    """`(token_ids, token_mask)` of keras-hub's backbone inputs, a dict of `token_ids` and
    optionally `padding_mask` (bool, or numbers 0 and 1)."""
    keys = set(inputs)
    if "token_ids" not in keys or keys - {"token_ids", "padding_mask"}:
        raise ValueError(f"LSTMBackbone reads token_ids (batch_size, T), or keras-hub's dict of "
                         f"token_ids and padding_mask; got a dict of {sorted(keys)}.")
    if "padding_mask" in keys and token_mask is not None:
        raise ValueError("LSTMBackbone was given a padding_mask in its inputs and a token_mask: "
                         "give one of them.")
    mask = inputs.get("padding_mask", token_mask)
    return inputs["token_ids"], None if mask is None else ops.cast(mask, "bool")


def preset_dtype(preset, dtype=None, load_weights=True):
    """The dtype to give keras-hub's loaders for `preset`: `dtype` (None: keras-hub's rule, the
    global policy for a float preset), except for a quantized preset, whose saved
    `DTypePolicyMap` (the quantized layers' policies) is kept with `dtype` as its default, and a
    preset that records a mixed policy (`save_mixed_policy_as_float` records the float dtype; a
    preset may have been written without it), which without `dtype` loads under the global
    policy as a float preset does.

    keras-hub 0.32's `Backbone.from_preset` replaces a saved map by the `dtype` it was given
    (None unless asked), so a quantized backbone's weights would not load into float layers; and
    its rule for an unasked dtype reads a mixed policy's name (`mixed_bfloat16`) as a dtype and
    fails. Returns `dtype`, a policy name, or the serialized map.

    Raises:
        ValueError: the preset is quantized and `load_weights` is False (new quantized weights
            are zeros: a quantized model is only loaded as it was saved).
    """
    if not preset_utils.check_file_exists(preset, preset_utils.CONFIG_FILE):
        return dtype  # keras-hub's loader names what is missing
    saved = preset_utils.load_json(preset, preset_utils.CONFIG_FILE).get("config", {}).get("dtype")
    layers = _quantized_layer_names(saved)
    if not layers:
        if dtype is None and _mixed_policy_name(saved):
            return keras.config.dtype_policy().name
        return dtype
    if not load_weights:
        raise ValueError(f"preset {preset!r} holds a quantized backbone ({', '.join(layers)}): "
                         f"it loads only with its weights (load_weights=False would give "
                         f"quantized layers of zeros); use the float model it was quantized "
                         f"from.")
    if dtype is not None and not isinstance(dtype, str):  # the map's entries take a name
        dtype = keras.dtype_policies.get(dtype).name
    config = preset_utils.set_dtype_in_config({"config": {"dtype": saved}}, dtype)
    return config["config"]["dtype"]


# The files `Backbone.save_to_preset` writes (task.json and task.weights.h5 are a task's).
_BACKBONE_PRESET_FILES = (preset_utils.CONFIG_FILE, preset_utils.METADATA_FILE,
                          preset_utils.MODEL_WEIGHTS_FILE,
                          preset_utils.SHARDED_MODEL_WEIGHTS_CONFIG_FILE)


def refuse_existing_files(folder, names):
    """Raises FileExistsError naming the first of `names` that exists in `folder`: a preset is
    saved into an empty or new folder, never over another's files."""
    for name in names:
        path = os.path.join(os.fspath(folder), name)
        if os.path.lexists(path):
            raise FileExistsError(f"{path} exists: save_to_preset never replaces a file; give "
                                  "an empty or new folder.")


def _quantized_layer_names(policy):
    """The names of the quantized layers a saved backbone policy records (a serialized
    `DTypePolicyMap`); empty for any other policy."""
    if not (isinstance(policy, dict) and policy.get("class_name") == "DTypePolicyMap"):
        return []
    return sorted(path.split("/")[-1] for path in policy.get("config", {}).get("policy_map", {}))


def _mixed_policy_name(policy):
    """The name of a saved mixed policy (`mixed_bfloat16`, ...); None for any other policy."""
    if not isinstance(policy, dict) or _quantized_layer_names(policy):
        return None
    name = policy.get("config", {}).get("name")
    return name if isinstance(name, str) and name.startswith("mixed_") else None


def _quantized_preset_layers(preset_dir):
    """`_quantized_layer_names` of the policy the preset folder's `config.json` records; empty
    where it cannot be read."""
    try:
        with open(os.path.join(preset_dir, preset_utils.CONFIG_FILE)) as f:
            return _quantized_layer_names(json.load(f).get("config", {}).get("dtype"))
    except (OSError, ValueError, AttributeError):
        return []


def save_mixed_policy_as_float(preset_dir):
    """Rewrites the backbone's dtype policy in the preset folder's `config.json` from a mixed
    policy (`mixed_bfloat16`, as psmm-train's `--mixed_precision` trains) to its variables' float
    dtype, which keras-hub's loaders read.

    keras-hub 0.32's `CausalLM.from_preset` and `Backbone.from_preset`, given no dtype, load a
    preset saved under a float policy under the global policy, and fail on a mixed policy's
    name (they read it as a dtype); loading a float preset under the global policy, they would
    not keep the mixed policy either. A quantized backbone's `DTypePolicyMap` stays as saved.
    """
    config_file = os.path.join(os.fspath(preset_dir), preset_utils.CONFIG_FILE)
    with open(config_file) as f:
        config = json.load(f)
    policy = config.get("config", {}).get("dtype")
    name = _mixed_policy_name(policy)
    if name is None:
        return
    policy["config"]["name"] = keras.dtype_policies.get(name).variable_dtype
    tmp = config_file + ".tmp"  # never a cut config.json beside the weights
    try:
        with open(tmp, "w") as f:
            json.dump(config, f, indent=4)
        os.replace(tmp, config_file)
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)


def check_subclassed(cls):
    """Raises RuntimeError when Keras has turned the keras-hub base classes of `cls` (one of
    psmm_tf's subclassed models) into functional ones in this process.

    Building a functional keras-hub model (e.g. `GPT2Backbone`, `GPT2CausalLM`) makes Keras put
    `Functional` under keras-hub's `Backbone` (and `Task`) for the whole process
    (keras-team/keras#17270); a subclassed model below them can then be neither built nor
    called (Keras' functional methods replace its own).
    """
    if any(base.__name__ == "Functional" and base.__module__.startswith("keras.")
           for base in cls.__mro__):
        raise RuntimeError(
            f"{cls.__name__} cannot be built or run in this Python process: a functional "
            f"keras-hub model (e.g. GPT2Backbone) was built in it, and Keras then makes "
            f"keras-hub's Backbone and Task classes functional for the whole process "
            f"(keras-team/keras#17270), which psmm_tf's subclassed models are not. Use "
            f"psmm_tf's models in a process that builds no functional keras-hub model.")

