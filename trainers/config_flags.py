"""The config fields psmm-train sets from flags: one table, defined and applied generically.

Each `ConfigFlag` names a flag, the `ExperimentConfig` field(s) it sets and a check; the flag's
type and choices come from the field itself. Each hyperparameter a registered model class
declares (`psmm_tf.configs.Hyperparameter`) is a flag too, made from its declaration
(`all_flags`). A flag left out keeps the preset's value, which `preset_notes` prints in --help.
Fields without a flag of their own are reached with `--override=section.field=value`
(repeatable), parsed by the field's type.
"""

import dataclasses
import math
import os
import typing

from absl import flags

from psmm_tf import configs
from psmm_tf import workdir as run_files
from psmm_tf.models import registry


@dataclasses.dataclass(frozen=True)
class ConfigFlag:
    """A flag that sets `fields` ("model.hidden_dim", ...) to its value, after `check`."""

    name: str
    fields: tuple
    help: str
    check: str = ""
    # Flag value -> field value, for flags whose 0 means the field's None.
    zero_is_none: bool = False
    # A model hyperparameter's flag: its declaration, and the model kinds that declare it.
    hyperparameter: configs.Hyperparameter | None = None
    kinds: tuple = ()


# name -> (predicate on a given value, message of absl's "flag --name=value: <message>").
CHECKS = {
    "positive": (lambda v: v >= 1, "must be an integer >= 1."),
    "eval_tokens": (lambda v: v >= 2,
                    "must be an integer >= 2 (a word to read and one to predict)."),
    "non_negative": (lambda v: v >= 0, "must be an integer >= 0."),
    "finite_positive": (lambda v: 0 < v < math.inf, "must be a finite number > 0."),
    "finite_non_negative": (lambda v: 0 <= v < math.inf, "must be a finite number >= 0."),
    "probability": (lambda v: 0 <= v < 1, "must be a probability in [0, 1)."),
    "decay": (lambda v: 0 < v <= 1, "must be in (0, 1]."),
    "seed": (lambda v: 0 <= v < 2**32, "must be an integer in [0, 2**32) (NumPy's seed range)."),
}

_F = ConfigFlag
CONFIG_FLAGS = (
    _F("dataset", ("data.dataset",), "Corpus: synthetic (generated, no files needed), ptb, "
       "wikitext2, wikitext103, or text (a folder with train.txt, valid.txt, test.txt)."),
    _F("data_dir", ("data.data_dir",), "Folder of the corpus files (required for real corpora, "
       "with --dataset naming their layout; read only, never written)."),
    _F("tfds_data_dir", ("data.tfds_data_dir",), "Where --dataset=ptb|wikitext2|wikitext103|text "
       "is prepared as a TFDS dataset (once, then read from there); default: TFDS's, "
       "~/tensorflow_datasets or $TFDS_DATA_DIR. --data_dir is only read."),
    _F("train_split", ("data.train_split",),
       "Corpus file used for training (e.g. valid where a training file is absent)."),
    _F("valid_split", ("data.valid_split",),
       "Corpus file used for validation (the schedule and model selection)."),
    _F("test_split", ("data.test_split",), "Corpus file used for testing."),
    _F("min_count", ("data.min_count",), "Words seen fewer times in training become <unk>.",
       "positive"),
    _F("max_vocab_size", ("data.max_vocab_size",), "At most this many words in the vocabulary.",
       "positive"),
    _F("synthetic_train_tokens", ("data.synthetic_train_tokens",),
       "Training tokens of the synthetic corpus.", "positive"),
    # Its help lists the registered kinds (`model_kind_help`).
    _F("model", ("model.kind",), "The model."),
    _F("embedding_dim", ("model.embedding_dim",), "Width of the word embedding.", "positive"),
    _F("input_embedding", ("model.input_embedding",), "Input word embedding: ids (a table) or "
       "chars (a character CNN of each word's spelling, Jozefowicz et al. 2016's CNN inputs)."),
    _F("softmax", ("model.softmax",), "Output layer: full softmax, importance-sampled (training "
       "only; exact in evaluation) or CNN softmax (Jozefowicz et al. 2016), for large "
       "vocabularies."),
    _F("num_sampled", ("model.num_sampled",),
       "Vocabulary samples per step of --softmax=sampled|cnn.", "positive"),
    _F("hidden_dim", ("model.hidden_dim",), "Units of every LSTM layer.", "positive"),
    _F("num_layers", ("model.num_layers",), "Number of LSTM layers.", "positive"),
    _F("window_size", ("model.window_size",),
       "L: hidden states the pointer scores, its own included.", "positive"),
    _F("dropout", ("model.input_dropout", "model.hidden_dropout", "model.output_dropout"),
       "Locked dropout on the embedding, between layers and on the output (all three).",
       "probability"),
    _F("zoneout", ("model.zoneout",), "Zoneout probability of the LSTM states.", "probability"),
    _F("init_scale", ("model.init_scale",), "Every weight of the LSTM and its softmax uniform "
       "in [-s, s], biases 0 (Zaremba et al. 2014); 0: Keras' initialisers (Glorot, "
       "orthogonal, forget-gate bias 1).", "finite_non_negative", True),
    _F("num_predicted", ("train.num_predicted",),
       "T: predicted positions per training window (the BPTT length).", "positive"),
    _F("pointer_memory", ("train.pointer_memory",), "recompute: windows of C + T tokens with "
       "C = window_size - 1 context positions recomputed (C = L - 1, T = 1 is the paper's "
       "scheme); cache: T-token windows with the previous window's hidden states as a constant "
       "memory."),
    _F("context_length", ("train.context_length",),
       "C for pointer_memory=recompute (default L - 1).", "non_negative"),
    _F("batch_size", ("train.batch_size",), "B: contiguous streams per batch (global batch).",
       "positive"),
    _F("epochs", ("train.max_epochs",), "Maximum number of epochs (paper: 64).", "positive"),
    _F("steps_per_epoch", ("train.steps_per_epoch",), "Limit of training steps per epoch.",
       "positive"),
    _F("patience", ("train.patience",), "Stop after this many epochs without improvement.",
       "positive"),
    _F("optimizer", ("train.optimizer",), "Optimizer (--learning_rate defaults to 0.001 when "
       "--optimizer=adam is given without it)."),
    _F("learning_rate", ("train.learning_rate",), "Initial learning rate.", "finite_positive"),
    _F("warmup_steps", ("train.warmup_steps",), "Linear learning-rate warm-up over the "
       "first this many steps (0: none, the paper's start).", "non_negative"),
    _F("pointer_warmup_steps", ("train.pointer_warmup_steps",), "Linear warm-up of the "
       "pointer's share: step k of the first N trains on (1 - k/N) p_vocab + (k/N) p (0: none, "
       "the paper's start).", "non_negative"),
    _F("lr_decay", ("train.lr_decay",), "Factor applied to the learning rate when validation "
       "perplexity gets worse (paper: 0.5), or after every epoch from --lr_decay_from_epoch on.",
       "decay"),
    _F("lr_decay_from_epoch", ("train.lr_decay_from_epoch",), "Zaremba et al.'s schedule: "
       "epochs 1..k at --learning_rate, then --lr_decay after every epoch whatever validation "
       "does (their medium LSTM: 6 with --lr_decay=0.8333 --epochs=39 --patience=39, which "
       "trains all 39). 0: the paper's "
       "(decay when validation gets worse).", "non_negative", True),
    _F("clip_norm", ("train.clip_norm",), "Global gradient norm limit (paper: 1).",
       "finite_positive"),
    _F("pointer_clip_norm", ("train.pointer_clip_norm",), "Own global norm limit of the "
       "pointer's variables (W, b, s); --clip_norm then applies to the rest. 0: one joint norm "
       "for all variables (the paper's).", "finite_non_negative", True),
    _F("char_cnn_clip_norm", ("train.char_cnn_clip_norm",), "Own global norm limit of the "
       "character-CNN input embedding's variables (--input_embedding=chars); --clip_norm then "
       "applies to the rest. 0: in the joint norm.", "finite_non_negative", True),
    _F("pointer_loss_weight", ("train.pointer_loss_weight",), "Weight of eq. 9's pointer term "
       "-log(g + sum a_i[x_i = y]) (paper: 1; 0: mixture NLL only, an ablation).",
       "finite_non_negative"),
    _F("calibrate_gate", ("train.calibrate_gate",), "After training, fit the scale and bias "
       "of PSMM's gate logit on the validation split and keep them in model.keras "
       "(--nocalibrate_gate: the trained gate as it is)."),
    _F("seed", ("train.seed", "model.seed"), "Seed of initialisation, dropout and data offsets.",
       "seed"),
    _F("jit_compile", ("train.jit_compile",), "XLA: auto (on with a GPU, off on CPU), on, off."),
    _F("native", ("train.native",), "psmm_tf's native CPU kernels in the training step: auto "
       "(where they build and run, else TensorFlow ops and one log line), on (fail where they "
       "cannot), off. Built with $CXX (default g++) into $PSMM_TF_CACHE (default "
       "~/.cache/psmm_tf)."),
    _F("mixed_precision", ("train.mixed_precision",), "Keras dtype policy: float32, or "
       "mixed_bfloat16 / mixed_float16 (float32 variables, mixture and loss; 16-bit LSTM, "
       "state and memory; mixed_float16 with dynamic loss scaling)."),
    _F("checkpoint_every_steps", ("train.checkpoint_every_steps",),
       "Steps between checkpoints.", "positive"),
    _F("max_eval_tokens", ("train.max_eval_tokens",),
       "Evaluate on at most this many tokens per split (>= 2).", "eval_tokens"),
    _F("eval_batch_size", ("train.eval_batch_size",), "Streams of the evaluation (1: exact).",
       "positive"),
    _F("init_from", ("train.init_from",), "Fine-tune: start from the weights and vocabulary of "
       "a trained run folder (its model.keras) or a .keras file; the model flags (preset) must "
       "describe that model."),
)
OVERRIDE_FLAG = "override"
# What a preset's None means, where the flag's help does not say it.
_UNSET = {"tfds_data_dir": "unset (TFDS's default)",
          "context_length": "unset (window_size - 1)", "steps_per_epoch": "unset (whole epochs)",
          "max_eval_tokens": "unset (whole splits)", "max_vocab_size": "unset (no limit)"}
# Fields whose values are fixed sets (the flag is an enum of them).
_CHOICES = {"data.dataset": configs.DATASETS, "data.train_split": configs.SPLITS,
            "data.valid_split": configs.SPLITS, "data.test_split": configs.SPLITS,
            "model.softmax": configs.SOFTMAX_KINDS,
            "model.input_embedding": configs.INPUT_EMBEDDINGS,
            "train.pointer_memory": configs.POINTER_MEMORY_MODES,
            "train.optimizer": configs.OPTIMIZERS, "train.jit_compile": configs.JIT_COMPILE_MODES,
            "train.native": configs.NATIVE_MODES,
            "train.mixed_precision": configs.PRECISION_POLICIES}


_SECTIONS = {"model": configs.ModelConfig, "train": configs.TrainConfig,
             "data": configs.DataConfig}


def hyperparameter_flags():
    """A `ConfigFlag` for each hyperparameter the registered model kinds declare (one flag per
    name: kinds that declare the same name share it)."""
    found = {}
    for kind in registry.model_kinds():
        for hyperparameter in configs.declared_hyperparameters(kind):
            name = hyperparameter.name
            if any(spec.name == name for spec in CONFIG_FLAGS):
                raise ValueError(f"model kind {kind!r} declares hyperparameter {name!r}, the "
                                 f"name of a psmm-train flag; rename it.")
            kinds = found[name].kinds + (kind,) if name in found else (kind,)
            first = found[name].hyperparameter if name in found else hyperparameter
            found[name] = ConfigFlag(name, (f"model.{name}",), f"{first.help} (--model="
                                     f"{'|'.join(kinds)})", zero_is_none=first.zero_is_none,
                                     hyperparameter=first, kinds=kinds)
    return tuple(found.values())


def model_kind_help():
    """--model's help: each registered kind with its class's one-line summary."""
    kinds = []
    for kind in registry.model_kinds():
        summary = (registry.model_class(kind).__doc__ or "").strip().split("\n")[0].rstrip(".")
        kinds.append(f"{kind}: {summary}" if summary else kind)
    return "The model. " + "; ".join(kinds) + "."


def all_flags():
    """`CONFIG_FLAGS` and the registered models' `hyperparameter_flags`."""
    return CONFIG_FLAGS + hyperparameter_flags()


def _validator(spec):
    """(predicate on a given value, absl's message) of flag `spec`, or None: no check."""
    hyperparameter = spec.hyperparameter
    if hyperparameter is None:
        return CHECKS[spec.check] if spec.check else None
    none = " or 0 (None)" if hyperparameter.zero_is_none else ""

    def accepts(value):
        if hyperparameter.zero_is_none and value == 0:
            return True
        try:
            hyperparameter.check(value)
        except ValueError:
            return False
        return True

    return accepts, f"must be {hyperparameter.expected}{none}."


def configure_native(environ=os.environ):
    """psmm_tf's native kernels' build settings from $PSMM_TF_CACHE (the cache folder) and
    $CXX (the C++ compiler), where set (`psmm_tf.native.configure`); the library reads none."""
    from psmm_tf import native

    native.configure(cache_dir=environ.get("PSMM_TF_CACHE"), compiler=environ.get("CXX"))


def _field_hint(path):
    """The type annotation of config field `path` ("train.batch_size" -> int)."""
    section, name = path.split(".")
    return typing.get_type_hints(_SECTIONS[section])[name]


def field_type(path):
    """The Python type of config field `path` ("train.batch_size" -> int), None removed; a
    model hyperparameter's declared type."""
    owner = next((spec for spec in hyperparameter_flags() if spec.fields[0] == path), None)
    if owner is not None:
        return owner.hyperparameter.type
    hint = _field_hint(path)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def field_value(config, path, default=None):
    """The value of field `path` in `config`; `default` for a hyperparameter its kind lacks."""
    section, name = path.split(".")
    return getattr(getattr(config, section), name, default)


def define_config_flags(flag_values, module_name):
    """Defines every flag of `all_flags()` (default None: the preset's) and --override."""
    common = dict(flag_values=flag_values, module_name=module_name)
    choices = {**_CHOICES, "model.kind": registry.model_kinds()}
    for spec in all_flags():
        path, kind = spec.fields[0], field_type(spec.fields[0])
        if path in choices:
            help_text = model_kind_help() if path == "model.kind" else spec.help
            flags.DEFINE_enum(spec.name, None, list(choices[path]), help_text, **common)
        elif kind is int:
            flags.DEFINE_integer(spec.name, None, spec.help, **common)
        elif kind is float:
            flags.DEFINE_float(spec.name, None, spec.help, **common)
        elif kind is bool:
            flags.DEFINE_boolean(spec.name, None, spec.help, **common)
        else:
            flags.DEFINE_string(spec.name, None, spec.help, **common)
        if _validator(spec):
            predicate, message = _validator(spec)
            flags.register_validator(spec.name, lambda v, p=predicate: v is None or p(v),
                                     message=message, flag_values=flag_values)
    flags.DEFINE_alias("bptt", "num_predicted", **common)
    flags.DEFINE_multi_string(
        OVERRIDE_FLAG, [], "section.field=value: sets any field of the config (e.g. "
        "train.keep_checkpoints=5, data.synthetic_seed=1), parsed by the field's type "
        "(none for an optional field's None); a field with a flag of its own takes the flag.",
        **common)


# The input-to-output gate's fields: set by its flags, where the gate run's checks and defaults
# come with them (an override of model.base_model would train a gate outside them); `none`
# for model.base_model is the default, no gate run.
_GATE_FIELD_FLAGS = {"model.base_model": "input_output_gate_on",
                     "model.gate_embedding_dim": "gate_embedding_dim",
                     "model.gate_dropout": "gate_dropout"}


def parse_override(text):
    """("section", "field", value) of an --override `section.field=value`; ValueError if bad."""
    path, sep, raw = text.partition("=")
    section, _, name = path.strip().partition(".")
    owner = next((f.name for f in all_flags() if path.strip() in f.fields),
                 _GATE_FIELD_FLAGS.get(path.strip()))
    if path.strip() == "model.base_model" and raw.strip().lower() == "none":
        owner = None  # the default: no gate run
    if sep and owner:
        raise ValueError(f"--{OVERRIDE_FLAG}={text}: {path.strip()} has its own flag, "
                         f"--{owner}.")
    if not sep or section not in _SECTIONS or name == "hyperparameters" or name not in {
            f.name for f in dataclasses.fields(_SECTIONS[section])}:
        raise ValueError(f"--{OVERRIDE_FLAG}={text}: expected section.field=value with a field "
                         f"of model, train or data (e.g. train.keep_checkpoints=5).")
    kind, raw = field_type(path.strip()), raw.strip()
    try:
        if raw.lower() == "none" and type(None) in typing.get_args(_field_hint(path.strip())):
            value = None
        elif kind is bool:
            value = {"true": True, "false": False}[raw.lower()]
        else:
            value = kind(raw)
    except (ValueError, KeyError):
        expected = {int: "an integer", float: "a number", bool: "true or false"}.get(kind, "text")
        raise ValueError(f"--{OVERRIDE_FLAG}={text}: {raw!r} is not {expected}.") from None
    return section, name, value


def config_overrides(flag_values):
    """{"model": {...}, "train": {...}, "data": {...}}: the fields the given flags set."""
    sections = {"model": {}, "train": {}, "data": {}}
    for spec in all_flags():
        value = flag_values[spec.name].value
        if value is None:
            continue
        if spec.zero_is_none and value == 0:
            value = None
        for path in spec.fields:
            section, name = path.split(".")
            sections[section][name] = value
    for text in flag_values[OVERRIDE_FLAG].value:
        section, name, value = parse_override(text)
        sections[section][name] = value
    if flag_values["optimizer"].value == "adam" and flag_values["learning_rate"].value is None:
        sections["train"]["learning_rate"] = 1e-3
    return sections


def preset_notes(preset_name):
    """{flag name: "default from --preset=NAME: VALUE"} for --help."""
    config = configs.get_preset(preset_name)
    notes = {}
    for spec in all_flags():
        default = spec.hyperparameter.default if spec.hyperparameter else None
        values = [field_value(config, path, default) for path in spec.fields]
        if spec.name == "dropout" and len(set(values)) > 1:
            value = "{}/{}/{} (input/hidden/output)".format(*values)
        elif spec.zero_is_none and values[0] is None:
            value = 0
        else:
            value = _UNSET.get(spec.name, "unset") if values[0] is None else values[0]
        notes[spec.name] = f"default from --preset={preset_name}: {value}"
    return notes


def check_combination(config, flag_values):
    """Raises ValueError for flags the resolved `config` could not honour (naming the flags).

    A real corpus needs --data_dir; the synthetic corpus is generated, so a --data_dir with it
    is refused (nothing is ever written into a data folder); flags the chosen corpus would
    ignore are refused rather than dropped, and so are flags the model or its training would
    not read (`_refuse_unused_model_flags`); a recompute context must lie inside the window;
    --tfds_data_dir must lie outside --data_dir; --strategy=mirrored's replicas must share
    --batch_size evenly.
    """
    f, data = flag_values, config.data
    if config.train.init_from is not None and f["compare_baseline"].value:
        raise ValueError("--init_from cannot be used with --compare_baseline: it names one "
                         "trained model; fine-tune each model in a run of its own.")
    if data.dataset != "synthetic" and not data.data_dir:
        raise ValueError(f"--data_dir is required for --dataset={data.dataset}: the folder "
                         "holding the corpus files (e.g. ptb.train.txt, ptb.valid.txt, "
                         "ptb.test.txt).")
    if data.dataset == "synthetic" and f["data_dir"].value is not None:
        if f["input_output_gate_on"].value is not None:
            reason = "the run of --input_output_gate_on trained on the synthetic corpus"
        elif f["dataset"].value is None:
            reason = ("--dataset is not given, so the preset's synthetic corpus would be "
                      "generated; name the layout of that folder's files with --dataset="
                      "ptb|wikitext2|wikitext103|text")
        else:
            reason = "--dataset=synthetic is generated into the workdir"
        raise ValueError(f"--data_dir={f['data_dir'].value} is refused: {reason}. Nothing is "
                         "written into a --data_dir.")
    if data.dataset == "synthetic":
        ignored = [f"--{n}" for n in ("min_count", "max_vocab_size", "tfds_data_dir")
                   if f[n].present]
        if ignored:
            raise ValueError(
                f"{', '.join(ignored)} cannot be used with --dataset=synthetic, which is "
                "generated into the workdir with the generator's vocabulary (all its words); "
                "they apply to the real corpora.")
    elif f["synthetic_train_tokens"].present:
        raise ValueError(f"--synthetic_train_tokens is only used with --dataset=synthetic, "
                         f"not --dataset={data.dataset}.")
    for spec in hyperparameter_flags():
        if f[spec.name].present and config.model.kind not in spec.kinds:
            raise ValueError(f"--{spec.name} is a setting of --model={'|'.join(spec.kinds)}, "
                             f"not of --model={config.model.kind}.")
    _refuse_unused_model_flags(config, f)
    train = config.train
    if (train.pointer_memory == "recompute" and train.context_length is not None
            and train.context_length >= config.model.window_size):
        raise ValueError(f"--context_length={train.context_length} must be < --window_size="
                         f"{config.model.window_size}: the pointer never reaches further back.")
    if data.tfds_data_dir is not None and data.data_dir is not None:
        from psmm_tf.data import tfds_corpus

        tfds_corpus.check_tfds_data_dir_apart(data.tfds_data_dir, data.data_dir)
    _check_replicas(config, f)


def _kinds(predicate):
    """The registered model kinds whose task class satisfies `predicate`, as "a|b"."""
    return "|".join(k for k in registry.model_kinds() if predicate(registry.model_class(k)))


def _has_pointer(model_class):
    return bool(getattr(model_class, "has_pointer", False))


def _has_sentinel_gate(model_class):
    # Only a sentinel gate is calibrated (`train_lib`'s finish: `has_sentinel_pointer`); its
    # model class is the one that can take a calibration (`set_gate_calibration`).
    return _has_pointer(model_class) and hasattr(model_class, "set_gate_calibration")


def _refuse_unused_model_flags(config, f):
    """Refuses a flag the user gave (`present`; a preset's value is never refused) that the
    resolved model or training scheme would not read. With --compare_baseline the flags serve
    `config`'s model and the LSTM baseline; the baseline reads no pointer flag, so they are
    judged on `config`'s model kind, which is also what they are judged on without it. A
    resumed run (its --workdir holds config.json) is not judged: its config records what it
    started with, which `run_setup.prepare_workdir` compares with the flags."""
    if "workdir" in f and f["workdir"].value and os.path.isfile(
            os.path.join(f["workdir"].value, run_files.CONFIG_FILE)):
        return
    model, train = config.model, config.train
    if f["context_length"].present and train.pointer_memory != "recompute":
        raise ValueError(
            f"--context_length is only used with --pointer_memory=recompute (C, the context "
            f"recomputed in each window), not --pointer_memory={train.pointer_memory}, whose "
            f"windows read the previous window's states as a memory instead (C = 0).")
    if f["num_sampled"].present and model.softmax == "full":
        raise ValueError("--num_sampled is only used with --softmax=sampled|cnn, not "
                         "--softmax=full, which scores the whole vocabulary.")
    if f["char_cnn_clip_norm"].present and model.input_embedding != "chars":
        raise ValueError(
            f"--char_cnn_clip_norm is only used with --input_embedding=chars (it clips the "
            f"character CNN's variables), not --input_embedding={model.input_embedding}.")
    model_class = registry.model_class(model.kind)
    given = [f"--{name}" for name in ("pointer_clip_norm", "pointer_warmup_steps",
                                      "pointer_loss_weight") if f[name].present]
    if given and not _has_pointer(model_class):
        raise ValueError(
            f"{', '.join(given)} {'is a setting' if len(given) == 1 else 'are settings'} of "
            f"a model with a pointer (--model={_kinds(_has_pointer)}), not of --model="
            f"{model.kind}, which has none.")
    if f["calibrate_gate"].present and config.model.base_model is not None:
        raise ValueError("--calibrate_gate is not used by an input-to-output gate run "
                         "(--input_output_gate_on): its model has no sentinel gate of its own "
                         "to calibrate.")
    if f["calibrate_gate"].present and not _has_sentinel_gate(model_class):
        raise ValueError(
            f"--calibrate_gate is a setting of a model with a sentinel gate (--model="
            f"{_kinds(_has_sentinel_gate)}), not of --model={model.kind}, which has no sentinel "
            f"gate to calibrate.")


def _check_replicas(config, f):
    """Refuses --logical_cpus without --strategy=mirrored, and a --batch_size that
    --strategy=mirrored's replicas cannot share evenly (each
    replica owns B / N streams), before any data is read (`distribution.rows_per_replica`
    refuses it again at the start of every run, a multi-worker one included)."""
    if "strategy" not in f:
        return
    if f["strategy"].value != "mirrored":
        if f["logical_cpus"].present:
            raise ValueError(f"--logical_cpus is only used with --strategy=mirrored (the CPU "
                             f"devices it mirrors over without a GPU), not --strategy="
                             f"{f['strategy'].value}.")
        return
    from psmm_tf.training import distribution

    replicas, devices = distribution.mirrored_replicas(f["logical_cpus"].value)
    batch_size = config.train.batch_size
    if batch_size % replicas:
        lower = batch_size - batch_size % replicas
        hint = " or ".join(f"--batch_size={n}" for n in (lower, lower + replicas) if n)
        preset = "" if f["batch_size"].present else " (the preset's)"
        raise ValueError(
            f"--batch_size={batch_size}{preset} is not a multiple of the {replicas} replicas "
            f"of --strategy=mirrored ({devices}): every replica owns the same number of "
            f"streams (batch rows). Give {hint}.")


def define_gate_flags(flag_values, module_name):
    """Defines --input_output_gate_on and the gate's two settings."""
    common = dict(flag_values=flag_values, module_name=module_name)
    flags.DEFINE_string(
        "input_output_gate_on", None, "A trained run's workdir: train only an input-to-output "
        "gate (Takase et al. 2017) on its model.keras, frozen, with its corpus, vocabulary and "
        "settings; --optimizer and --learning_rate default to adam and 0.001 in this mode.",
        **common)
    flags.DEFINE_integer("gate_embedding_dim", 300, "Width of the input-to-output gate's "
                         "embedding (with --input_output_gate_on; paper: 300).", lower_bound=1,
                         **common)
    flags.DEFINE_float("gate_dropout", 0.5, "Dropout on the input-to-output gate's embedding "
                       "(with --input_output_gate_on; paper: 0.5).", **common)
    flags.register_validator("gate_dropout", lambda v: 0 <= v < 1,
                             message=CHECKS["probability"][1], flag_values=flag_values)


def gate_base_config(flag_values, overrides):
    """The config of --input_output_gate_on's gate run, before `overrides` are applied.

    The gate trains on the run's frozen model with its corpus and settings: flags that describe
    the model or the corpus are refused. `overrides` (from `config_overrides`) is narrowed in
    place to what a gate run takes: training fields, --data_dir and the model seed; the
    optimizer defaults to Adam at 0.001 (SGD: 1).
    """
    from psmm_tf.training import gate_training

    f = flag_values
    given = [f"--{spec.name}" for spec in all_flags()
             if spec.fields[0].split(".")[0] in ("model", "data") and spec.name != "data_dir"
             and f[spec.name].present]
    given += [f"--{name}" for name in ("preset", "compare_baseline") if f[name].present]
    given += [f"--{OVERRIDE_FLAG}={text}" for text in f[OVERRIDE_FLAG].value
              if not text.strip().startswith("train.")]
    if given:
        raise ValueError(f"--input_output_gate_on trains a gate on that run's model with its "
                         f"corpus and settings; {', '.join(given)} cannot be combined with it.")
    try:
        base = gate_training.input_output_gate_config(
            f["input_output_gate_on"].value, embedding_dim=f["gate_embedding_dim"].value,
            dropout=f["gate_dropout"].value)
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(f"--input_output_gate_on={f['input_output_gate_on'].value}: "
                         f"{err}") from None
    overrides["model"] = {k: v for k, v in overrides["model"].items() if k == "seed"}
    train = overrides["train"]
    train.setdefault("optimizer", "adam")
    if f["learning_rate"].value is None:
        train["learning_rate"] = 1e-3 if train["optimizer"] == "adam" else 1.0
    return base

