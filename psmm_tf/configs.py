"""Configuration: frozen dataclasses with a comment on every field, and named presets.

`ExperimentConfig` holds a `ModelConfig`, a `TrainConfig` and a `DataConfig`; `get_preset`
names four (`tiny` for tests, `small` for CPU runs, `medium` the paper's PTB model, `large`).
The presets' training regime and the paper's exact one are argued in docs/design_notes.md
("Objective: sum over a window's targets ..." and after). Trainers map flags onto these
fields; the library itself never reads flags. A model kind's own settings are declared by its
class (`Hyperparameter`s, psmm_tf/models/registry.py) and carried in `ModelConfig.hyperparameters`.

Example:
```python
from psmm_tf import configs

config = configs.get_preset("medium").replace(model={"window_size": 50}, train={"seed": 1})
assert configs.ExperimentConfig.from_json(config.to_json()) == config
```
"""

import dataclasses
import json

from psmm_tf import native

DATASETS = ("synthetic", "ptb", "wikitext2", "wikitext103", "text")
POINTER_MEMORY_MODES = ("recompute", "cache")
JIT_COMPILE_MODES = ("auto", "on", "off")
# psmm_tf's native CPU kernels in the training step (`psmm_tf.native`).
NATIVE_MODES = native.MODES
SOFTMAX_KINDS = ("full", "sampled", "cnn")
INPUT_EMBEDDINGS = ("ids", "chars")
OPTIMIZERS = ("sgd", "adam")
# Keras dtype policies a run may train under: float32, or float32 variables with 16-bit compute.
PRECISION_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
SPLITS = ("train", "valid", "test")
# The fewest characters per word (`ModelConfig.max_word_length`, begin and end markers
# included) a model that spells words can read: the widest convolution of the character CNN
# (`psmm_tf.layers.char_cnn.DEFAULT_FILTERS`: 5) must fit in a spelling. Below 3 a spelling holds
# no character at all (2 spells every word as [begin, end]; 1 cannot hold both markers).
MIN_WORD_LENGTH = 5


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}.")


def check_positive_ints(config, names, optional=()):
    """ValueError naming the first field of `config` in `names`, or in `optional` and not None,
    that is not an integer >= 1."""
    for name in (*names, *(n for n in optional if getattr(config, n) is not None)):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")


@dataclasses.dataclass(frozen=True)
class Hyperparameter:
    """A setting one model kind owns, declared by its registered class (its `hyperparameters`,
    `psmm_tf.models.registry`): `build_model` passes it to that class's constructor, and
    psmm-train gives it a flag `--<name>` of `type` with `help`.

    Example: `Hyperparameter("switch_units", int, 64, "Hidden units of the switch MLP.",
    accepts=lambda n: n >= 1, expected="an integer >= 1")`.
    """

    name: str
    # int, float, bool or str: the type of a value and of the flag.
    type: type
    default: object
    # The flag's help.
    help: str
    # The values accepted (None aside): a predicate on a value of `type`, and what it wants,
    # as the error says it ("switch_units must be <expected>, got 0.").
    accepts: object = lambda value: True
    expected: str = "any value"
    # None is a value too (the default may be None); with zero_is_none the flag's 0 gives None.
    optional: bool = False
    zero_is_none: bool = False

    def check(self, value):
        """Raises ValueError naming the setting and what it expects unless `value` is one."""
        if value is None and self.optional:
            return
        number = self.type is float and isinstance(value, int)  # 1 for 1.0
        typed = ((isinstance(value, self.type) or number)
                 and (self.type is bool or not isinstance(value, bool)))
        if not typed or not self.accepts(value):
            raise ValueError(f"{self.name} must be {self.expected}"
                             f"{' or None' if self.optional else ''}, got {value!r}.")


# kind -> the `Hyperparameter`s its class declares (recorded by `models.register_model`).
_DECLARED = {}


def declare_hyperparameters(kind, hyperparameters):
    """Records the `Hyperparameter`s of model kind `kind` (done by `models.register_model`).

    Raises:
        TypeError: an entry is not a `Hyperparameter`.
        ValueError: a name is a `ModelConfig` field, repeated, or another kind's setting of
            another type; or a default is not accepted.
    """
    fields = _MODEL_FIELDS | {"hyperparameters"}
    names = [getattr(h, "name", None) for h in hyperparameters]
    for hyperparameter in hyperparameters:
        if not isinstance(hyperparameter, Hyperparameter):
            raise TypeError(f"model kind {kind!r} declares {hyperparameter!r}; expected "
                            f"configs.Hyperparameter entries.")
        name = hyperparameter.name
        if name in fields or names.count(name) > 1:
            raise ValueError(f"model kind {kind!r} declares hyperparameter {name!r} "
                             f"{'twice' if name not in fields else 'that is a ModelConfig field'}.")
        hyperparameter.check(hyperparameter.default)
        for other, declared in _DECLARED.items():
            for twin in declared:
                if other != kind and twin.name == name and twin.type is not hyperparameter.type:
                    raise ValueError(f"model kind {kind!r} declares {name!r} as "
                                     f"{hyperparameter.type.__name__}; kind {other!r} declares "
                                     f"it as {twin.type.__name__}.")
    _DECLARED[kind] = tuple(hyperparameters)


def forget_hyperparameters(kind):
    """Forgets the `Hyperparameter`s of model kind `kind` (`models.unregister_model`)."""
    _DECLARED.pop(kind, None)


def declared_hyperparameters(kind):
    """The `Hyperparameter`s model kind `kind` declares (none for an unregistered kind)."""
    return _DECLARED.get(kind, ())


def _own_hyperparameters(kind, given):
    """The values of `given` (name -> value) that are kind's own and not its defaults, checked.

    Another registered kind's settings are dropped: they do not shape this kind's model (a
    comparison's baseline inherits the model's; config.json files of older runs list every
    kind's). A name no registered kind declares is an error; an unregistered kind keeps all.
    """
    if kind not in _DECLARED:
        return dict(given)
    own = {h.name: h for h in _DECLARED[kind]}
    known = {h.name for declared in _DECLARED.values() for h in declared}
    kept = {}
    for name, value in given.items():
        if name in own:
            own[name].check(value)
            if value != own[name].default:
                kept[name] = value
        elif name not in known:
            raise ValueError(f"{name!r} is neither a ModelConfig field nor a hyperparameter of "
                             f"model kind {kind!r} (its own: {sorted(own)}) or of another "
                             f"registered kind.")
    return kept


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The network."""

    # "psmm" (pointer sentinel-LSTM), "lstm" (the softmax-only baseline, same backbone) or
    # "pointer_softmax" (the same pointer with Gulcehre et al.'s switch instead of the sentinel).
    kind: str = "psmm"
    # Size of the softmax vocabulary; set from the data's vocabulary.
    vocab_size: int = 10000
    # Width of the word embedding.
    embedding_dim: int = 650
    # Units of every LSTM layer; the last layer's size is the pointer's key/query size D.
    hidden_dim: int = 650
    # Number of stacked LSTM layers.
    num_layers: int = 2
    # The pointer's window L: how many recent hidden states (its own included) it scores.
    window_size: int = 100
    # Locked (variational) dropout on the embedding output, i.e. the input of layer 1.
    input_dropout: float = 0.5
    # Locked dropout between LSTM layers (the input of layers 2..n).
    hidden_dropout: float = 0.5
    # Locked dropout on the last layer's output, on the softmax's input only (the pointer reads
    # the undropped states).
    output_dropout: float = 0.5
    # Zoneout probability on the recurrent state (h and c) of every LSTM layer.
    zoneout: float = 0.1
    # Output layer: "full" softmax, "sampled" (importance sampling in training, exact softmax in
    # evaluation) or "cnn" (character-CNN output embeddings, sampled in training); the latter
    # two train large vocabularies without a [B, T, V] tensor (Jozefowicz et al. 2016).
    softmax: str = "full"
    # Vocabulary samples per training step of the "sampled" and "cnn" softmaxes.
    num_sampled: int = 1024
    # Characters kept per word by the CNN softmax and the "chars" input embedding (begin/end
    # markers included).
    max_word_length: int = 24
    # Input word embedding: "ids" (a V x embedding_dim table) or "chars" (a character CNN of
    # each word's spelling, Jozefowicz et al. 2016's "CNN inputs": a word outside the
    # vocabulary read with its characters gets an embedding of its own).
    input_embedding: str = "ids"
    # Seed of the initialisers and dropout masks (None: nondeterministic).
    seed: int | None = None
    # None: Keras' initialisers (Glorot kernels, orthogonal recurrent kernels, forget-gate bias
    # 1). A value s: every weight of the backbone and the vocabulary head uniform in [-s, s]
    # and every bias 0 (Zaremba et al. 2014); the pointer keeps its own initialisers.
    init_scale: float | None = None
    # Path of a trained run's `model.keras`. When set, the model is that trained model, frozen,
    # with an input-to-output gate on its softmax (Takase et al. 2017); only the gate trains,
    # and the fields above must describe the trained model (they are checked when it loads).
    base_model: str | None = None
    # Width of the gate's own word embedding e'(x_t) (Takase et al.: 300); with base_model only.
    gate_embedding_dim: int = 300
    # Dropout on the gate's embedding in training (Takase et al.: 0.5); with base_model only.
    gate_dropout: float = 0.5
    # The kind's own settings given (name -> value), declared by its class (`Hyperparameter`s,
    # e.g. psmm's initial_gate, pointer_softmax's switch_units); read each as an attribute
    # (`config.initial_gate`: the default where not given). Only values other than the
    # defaults are kept; other kinds' are dropped. config.json lists them beside the fields.
    hyperparameters: dict = dataclasses.field(default_factory=dict)

    def __getattr__(self, name):
        """The kind's hyperparameter `name` (its default unless given)."""
        given = self.__dict__.get("hyperparameters", {})
        for hyperparameter in declared_hyperparameters(self.__dict__.get("kind")):
            if hyperparameter.name == name:
                return given.get(name, hyperparameter.default)
        if name in given:  # an unregistered kind's
            return given[name]
        raise AttributeError(f"ModelConfig has no field {name!r}, and model kind "
                             f"{self.__dict__.get('kind')!r} no hyperparameter of that name.")

    def hyperparameter_values(self):
        """{name: value} of each hyperparameter the kind declares, defaults filled in."""
        return {h.name: self.hyperparameters.get(h.name, h.default)
                for h in declared_hyperparameters(self.kind)}

    @property
    def spelling_length(self):
        """Characters per word of the corpus's spellings the model reads (`max_word_length`
        with character inputs), or None: the model reads ids only."""
        return self.max_word_length if self.input_embedding == "chars" else None

    def __post_init__(self):
        # The kinds are the registered task classes (psmm_tf/models/registry.py, which imports
        # this module): `build_model` and the trainers' flags check the kind against them.
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError(f"kind must be a model kind such as 'psmm' or 'lstm', got "
                             f"{self.kind!r}.")
        if not isinstance(self.hyperparameters, dict) or not all(
                isinstance(name, str) for name in self.hyperparameters):
            raise ValueError(f"hyperparameters must be a dict of name -> value, got "
                             f"{self.hyperparameters!r}.")
        object.__setattr__(self, "hyperparameters",
                           _own_hyperparameters(self.kind, self.hyperparameters))
        _check_choice("softmax", self.softmax, SOFTMAX_KINDS)
        _check_choice("input_embedding", self.input_embedding, INPUT_EMBEDDINGS)
        check_positive_ints(self, ("vocab_size", "embedding_dim", "hidden_dim", "num_layers",
                                   "window_size", "num_sampled", "max_word_length"))
        spells_words = self.input_embedding == "chars" or self.softmax == "cnn"
        if spells_words and self.max_word_length < MIN_WORD_LENGTH:
            raise ValueError(
                f"max_word_length must be >= {MIN_WORD_LENGTH} (characters per spelled word, "
                f"its begin and end markers included: the character CNN's widest filter is "
                f"{MIN_WORD_LENGTH}), got {self.max_word_length}.")
        for name in ("input_dropout", "hidden_dropout", "output_dropout", "zoneout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}.")
        if self.base_model is not None and (not isinstance(self.base_model, str)
                                            or not self.base_model):
            raise ValueError(f"base_model must be the path of a trained model.keras or None, "
                             f"got {self.base_model!r}.")
        check_positive_ints(self, ("gate_embedding_dim",))
        if self.init_scale is not None and not 0.0 < self.init_scale < float("inf"):
            raise ValueError(f"init_scale must be a finite number > 0 or None, got "
                             f"{self.init_scale!r}.")
        if not 0.0 <= self.gate_dropout < 1.0:
            raise ValueError(f"gate_dropout must be in [0, 1), got {self.gate_dropout!r}.")


# The names of ModelConfig's own fields (its hyperparameters are named beside them).
_MODEL_FIELDS = {field.name for field in dataclasses.fields(ModelConfig)} - {"hyperparameters"}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation and the windowed training scheme (docs/architecture.md)."""

    # Number of contiguous streams the corpus is cut into (rows of a batch).
    batch_size: int = 32
    # T: positions whose loss is taken per window (BPTT length of the cache mode).
    num_predicted: int = 100
    # "recompute": windows of C + T tokens, C = window_size - 1 context positions recomputed
    # with the current weights (C = L - 1, T = 1 is the paper's k1 = 1, k2 = L);
    # "cache": T-token windows with the previous window's hidden states as a stop-gradient memory.
    pointer_memory: str = "cache"
    # C for "recompute"; None means window_size - 1. Ignored by "cache" (C = 0).
    context_length: int | None = None
    # "sgd" or "adam".
    optimizer: str = "sgd"
    # Initial learning rate.
    learning_rate: float = 1.0
    # Linear learning-rate warm-up: global step k (1-based) of the first `warmup_steps` steps
    # trains at `learning_rate * k / warmup_steps` (0: none, the paper's start).
    warmup_steps: int = 0
    # Linear warm-up of the pointer's share (models with a pointer): global step k of the first
    # `pointer_warmup_steps` trains on the mixture `(1 - k / N) p_vocab + (k / N) p`, so the
    # first updates cannot be spent on a pointer that cannot point yet; then on `p` itself (eq.
    # 3). Evaluation always scores `p`. 0: none (the paper's start).
    pointer_warmup_steps: int = 0
    # Global gradient norm clipping of the loss summed over a window's T targets (Zaremba et al.
    # 2014: 5; the paper: 1, with one target per update).
    clip_norm: float = 5.0
    # When set, the pointer's variables (W, b, s) are clipped by their own global norm at this
    # value and `clip_norm` applies to the rest of the model (None: one joint norm, the paper's).
    pointer_clip_norm: float | None = 0.25
    # When set, a character-CNN input embedding's variables (`input_embedding="chars"`) are
    # clipped by their own global norm at this value, apart from `clip_norm`'s group: under one
    # joint norm the CNN's large gradients take the whole budget and the model stalls
    # (docs/results.md, "Character-CNN word inputs"). None: the joint norm. No effect on models
    # reading ids.
    char_cnn_clip_norm: float | None = 1.0
    # Weight of eq. 9's pointer term -log(g + sum_{i: x_i = y} a_i) in the objective. The paper
    # uses 1; 0 (the default) trains on the mixture's negative log-likelihood alone. The term's
    # gradient always pushes the gate g towards 1, and at these budgets it left the gate
    # miscalibrated (2.2 too high on its logit on PTB) and PSMM 0.93 of the LSTM instead of 0.90
    # (docs/design_notes.md, docs/results.md).
    pointer_loss_weight: float = 0.0
    # After training, fit Platt scaling of PSMM's gate logit (`scale * l + bias`) on the
    # validation split and keep it in model.keras (`psmm_tf.evaluation.gate_calibration`): the
    # trained gate is overconfident on new text (docs/design_notes.md). No effect on other kinds.
    calibrate_gate: bool = True
    # The learning rate is multiplied by this when validation perplexity gets worse (paper: 0.5),
    # or, with `lr_decay_from_epoch`, after every epoch from that one on.
    lr_decay: float = 0.5
    # None: the paper's schedule (decay when validation gets worse). k: Zaremba et al.'s (2014):
    # epochs 1 .. k at `learning_rate`, then `lr_decay` after every epoch whatever validation does
    # (their medium LSTM: k = 6, lr_decay = 1 / 1.2, 39 epochs). `patience` still stops a run
    # (patience = max_epochs: it runs to its end, as theirs).
    lr_decay_from_epoch: int | None = None
    # Stop after this many epochs without a better validation perplexity (paper: 3).
    patience: int = 3
    # At most this many epochs (paper: 64).
    max_epochs: int = 64
    # Limit of training steps per epoch (None: the whole training split).
    steps_per_epoch: int | None = None
    # Batch size and window length of the exact evaluation (batch 1 keeps every history whole).
    eval_batch_size: int = 1
    eval_length: int = 100
    # Seed of the run (initialisation, dropout, data offsets).
    seed: int = 0
    # The Keras dtype policy of the model: "float32", or "mixed_bfloat16" / "mixed_float16"
    # (variables float32; the LSTM, the heads, the carried state and memory in 16 bits; the
    # mixture, the loss and the gate in float32), saved with model.keras; mixed_float16 adds
    # dynamic loss scaling (docs/design_notes.md, "Mixed precision").
    mixed_precision: str = "float32"
    # XLA compilation of the training and evaluation steps: "auto" (on where a GPU is present,
    # off on a CPU, where it is slower for these LSTMs: docs/results.md), "on" or "off".
    jit_compile: str = "auto"
    # psmm_tf's native CPU kernels in the training step (`psmm_tf.native`, like Keras'
    # `use_cudnn`): "auto" uses them where they build and run, else TensorFlow ops with one log
    # line naming why; "on" fails naming what is missing (compiler, headers, a GPU or XLA
    # present); "off" never builds them. The numbers are the same to float rounding.
    native: str = "auto"
    # A checkpoint is written every this many training steps, and at the end of every epoch.
    checkpoint_every_steps: int = 500
    # Number of checkpoints kept in workdir/checkpoints.
    keep_checkpoints: int = 3
    # Evaluate on at most this many tokens of the validation and test splits (None: all).
    max_eval_tokens: int | None = None
    # Fine-tuning: a trained run folder (its model.keras) or a .keras file whose weights and
    # vocabulary a new run starts from; the model fields must describe that model (None: a
    # fresh initialisation).
    init_from: str | None = None
    # Resolved at the start (never given): the sha256 of the .keras file `init_from` named when
    # the run started from it (a resumed run keeps the one its checkpoints started from).
    init_from_sha256: str | None = None

    def __post_init__(self):
        _check_choice("pointer_memory", self.pointer_memory, POINTER_MEMORY_MODES)
        _check_choice("optimizer", self.optimizer, OPTIMIZERS)
        _check_choice("jit_compile", self.jit_compile, JIT_COMPILE_MODES)
        _check_choice("native", self.native, NATIVE_MODES)
        _check_choice("mixed_precision", self.mixed_precision, PRECISION_POLICIES)
        check_positive_ints(self, ("batch_size", "num_predicted", "patience", "max_epochs",
                                   "eval_batch_size", "eval_length", "checkpoint_every_steps",
                                   "keep_checkpoints"), optional=("steps_per_epoch",
                                                                  "max_eval_tokens"))
        if self.max_eval_tokens is not None and self.max_eval_tokens < 2:
            raise ValueError(f"max_eval_tokens must be >= 2 (a word to read and one to "
                             f"predict), got {self.max_eval_tokens!r}.")
        for name in ("warmup_steps", "pointer_warmup_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}.")
        if self.init_from is not None and (not isinstance(self.init_from, str)
                                           or not self.init_from):
            raise ValueError(f"init_from must be the path of a trained run folder or .keras "
                             f"file, or None; got {self.init_from!r}.")
        if self.init_from_sha256 is not None and not (
                isinstance(self.init_from_sha256, str) and len(self.init_from_sha256) == 64
                and all(c in "0123456789abcdef" for c in self.init_from_sha256)):
            raise ValueError(f"init_from_sha256 must be a sha256 (64 hex digits) or None; got "
                             f"{self.init_from_sha256!r}.")
        if not isinstance(self.calibrate_gate, bool):
            raise ValueError(f"calibrate_gate must be True or False, got {self.calibrate_gate!r}.")
        if self.context_length is not None and self.context_length < 0:
            raise ValueError(f"context_length must be >= 0, got {self.context_length!r}.")
        for name in ("learning_rate", "clip_norm"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}.")
        for name in ("pointer_clip_norm", "char_cnn_clip_norm"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 or None, got {value!r}.")
        if not 0.0 <= self.pointer_loss_weight < float("inf"):
            raise ValueError(f"pointer_loss_weight must be a finite number >= 0, got "
                             f"{self.pointer_loss_weight!r}.")
        if not 0.0 < self.lr_decay <= 1.0:
            raise ValueError(f"lr_decay must be in (0, 1], got {self.lr_decay!r}.")
        if self.lr_decay_from_epoch is not None and not (
                isinstance(self.lr_decay_from_epoch, int)
                and not isinstance(self.lr_decay_from_epoch, bool)
                and self.lr_decay_from_epoch >= 1):
            raise ValueError(f"lr_decay_from_epoch must be an integer >= 1 or None, got "
                             f"{self.lr_decay_from_epoch!r}.")

    def resolved_context_length(self, window_size):
        """C: the context positions of a training window for this config."""
        if self.pointer_memory == "cache":
            return 0
        return window_size - 1 if self.context_length is None else self.context_length


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Which corpus, where it is, and how its vocabulary is made."""

    # "synthetic" (the embedded generator), "ptb", "wikitext2", "wikitext103" or "text" (a folder
    # with train.txt, valid.txt, test.txt).
    dataset: str = "synthetic"
    # Folder holding the corpus files (for "synthetic": where the generated splits are written).
    # For the real corpora it is the TFDS builder's manual_dir: only read, never written.
    data_dir: str | None = None
    # Where the real corpora are prepared as TFDS datasets (once, then read from there); None:
    # TFDS's default, ~/tensorflow_datasets or $TFDS_DATA_DIR, shared with `tfds build`.
    tfds_data_dir: str | None = None
    # Words seen fewer times than this in the training split become <unk>.
    min_count: int = 1
    # At most this many words in the vocabulary (None: no limit).
    max_vocab_size: int | None = None
    # Seed and training-split size of the synthetic corpus.
    synthetic_seed: int = 0
    synthetic_train_tokens: int = 100_000
    # The corpus file that serves as each role. The default uses each split for itself;
    # train_split="valid", valid_split="test", test_split="test" trains on WikiText-2's
    # validation file where its training file is absent (the vocabulary is always built from
    # the file that serves as training split).
    train_split: str = "train"
    valid_split: str = "valid"
    test_split: str = "test"

    def __post_init__(self):
        _check_choice("dataset", self.dataset, DATASETS)
        for name in ("train_split", "valid_split", "test_split"):
            _check_choice(name, getattr(self, name), SPLITS)
        check_positive_ints(self, ("min_count",), optional=("max_vocab_size",))
        if (not isinstance(self.synthetic_seed, int) or isinstance(self.synthetic_seed, bool)
                or self.synthetic_seed < 0):
            raise ValueError(f"synthetic_seed must be an integer >= 0 (the seed of the "
                             f"synthetic corpus's generator), got {self.synthetic_seed!r}.")
        if self.max_vocab_size is not None and self.max_vocab_size < 3:
            raise ValueError(f"max_vocab_size must be >= 3 (<unk>, <eos> and at least one "
                             f"word), got {self.max_vocab_size}.")


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """A model, how to train it, and on what."""

    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    data: DataConfig = DataConfig()

    def replace(self, model=None, train=None, data=None):
        """A copy with fields of `model`, `train` and `data` (dicts) replaced; `model` may name
        the kind's hyperparameters as fields (`{"initial_gate": 0.3}`)."""
        model = dict(model or {})
        given = {name: model.pop(name) for name in list(model) if name not in _MODEL_FIELDS}
        if given:
            model["hyperparameters"] = {
                **model.get("hyperparameters", self.model.hyperparameters), **given}
        return ExperimentConfig(
            model=dataclasses.replace(self.model, **model),
            train=dataclasses.replace(self.train, **(train or {})),
            data=dataclasses.replace(self.data, **(data or {})),
        )

    def to_json(self):
        """The config as a JSON string (written beside checkpoints and exports); the model's
        hyperparameters sit beside its fields, each with its value."""
        fields = dataclasses.asdict(self)
        model = fields["model"]
        model.update({**model.pop("hyperparameters"), **self.model.hyperparameter_values()})
        return json.dumps(fields, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        """The config a `to_json` string describes; unknown fields (at the top level or in a
        section) are an error. The model section's names other than `ModelConfig` fields are
        the kind's hyperparameters (another registered kind's are dropped, see
        `ModelConfig.hyperparameters`).

        A config.json without `pointer_clip_norm`, `char_cnn_clip_norm` and
        `pointer_loss_weight` trained with one joint norm and eq. 9 whole, and reads back that
        way, not with the current defaults; one without `calibrate_gate` kept the trained gate.
        """
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise ValueError(f"expected a JSON object with model, train and data, got "
                             f"{type(fields).__name__}.")
        unknown = sorted(set(fields) - {"model", "train", "data"})
        if unknown:  # as inside a section: an unknown field is an error, never dropped
            raise ValueError(f"unexpected top-level field(s) {unknown}; expected model, train "
                             f"and data.")
        train = dict(fields.get("train", {}))
        if "train" in fields:
            train.setdefault("pointer_clip_norm", None)
            train.setdefault("char_cnn_clip_norm", None)
            train.setdefault("pointer_loss_weight", 1.0)
            train.setdefault("calibrate_gate", False)
        model = dict(fields.get("model", {}))
        given = {name: model.pop(name) for name in list(model) if name not in _MODEL_FIELDS}
        return cls(
            model=ModelConfig(**model, hyperparameters=given),
            train=TrainConfig(**train),
            data=DataConfig(**fields.get("data", {})),
        )


PRESETS = {
    # Seconds on a CPU: for tests only.
    "tiny": ExperimentConfig(
        ModelConfig(embedding_dim=16, hidden_dim=16, num_layers=2, window_size=8,
                    input_dropout=0.1, hidden_dropout=0.1, output_dropout=0.1, zoneout=0.1),
        TrainConfig(batch_size=4, num_predicted=8, max_epochs=2, eval_length=16),
    ),
    # 2x200, window 50: CPU benchmarks and quick real-data runs. Zaremba et al.'s small
    # initialisation (uniform in [-0.1, 0.1]) and the pointer's share warmed up, as medium.
    "small": ExperimentConfig(
        ModelConfig(embedding_dim=200, hidden_dim=200, num_layers=2, window_size=50,
                    input_dropout=0.3, hidden_dropout=0.3, output_dropout=0.3, zoneout=0.1,
                    init_scale=0.1),
        TrainConfig(batch_size=20, num_predicted=35, eval_length=100,
                    pointer_warmup_steps=100),
    ),
    # The paper's PTB model (2x650, window 100, dropout 0.5) in Zaremba et al.'s medium regime:
    # batch 20, BPTT 35, weights uniform in [-0.05, 0.05]; the pointer's share warmed up over
    # the first 100 updates (docs/design_notes.md).
    "medium": ExperimentConfig(ModelConfig(init_scale=0.05),
                               TrainConfig(batch_size=20, num_predicted=35,
                                           pointer_warmup_steps=100)),
    # 2x1500 (the size of Zaremba et al.'s large model).
    "large": ExperimentConfig(
        ModelConfig(embedding_dim=1500, hidden_dim=1500, num_layers=2, window_size=100,
                    input_dropout=0.65, hidden_dropout=0.65, output_dropout=0.65, zoneout=0.1,
                    init_scale=0.04),
        TrainConfig(batch_size=20, num_predicted=35, pointer_warmup_steps=100),
    ),
}


def get_preset(name):
    """The `ExperimentConfig` of a named preset ("tiny", "small", "medium", "large")."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}; expected one of {sorted(PRESETS)}.")
    return PRESETS[name]

