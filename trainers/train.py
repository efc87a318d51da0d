r"""psmm-train: trains a pointer sentinel mixture model (or its LSTM baseline); resumes runs.

Usage examples:
  # About a minute on a CPU: PSMM against the LSTM baseline on the embedded synthetic corpus.
  psmm-train --preset=small --dataset=synthetic --epochs=3 --compare_baseline \
      --workdir=/tmp/psmm_quickstart

  # The paper's Penn Treebank model (2x650, window 100, BPTT 100, batch 32).
  psmm-train --preset=medium --dataset=ptb --data_dir=/data/ptb --workdir=/tmp/ptb_psmm

  # An input-to-output gate (Takase et al. 2017) on that run's frozen model: Adam, lr 0.001.
  psmm-train --input_output_gate_on=/tmp/ptb_psmm --workdir=/tmp/ptb_psmm_gate

  # Two GPUs of one machine, or the workers listed in TF_CONFIG.
  psmm-train --preset=medium --dataset=ptb --data_dir=/data/ptb --strategy=mirrored ...

  # The settings a preset gives every flag left out: its defaults in this help.
  psmm-train --preset=medium --help

A named preset fills every setting a flag does not give (the help below names the value of
--preset's, or of the --preset given with --help). A --workdir that already holds a run resumes
it (same settings; --epochs may grow). The workdir then holds config.json, vocab.txt,
checkpoints/, model.keras (the best model by validation perplexity), history.json, steps.jsonl,
results.json and tensorboard/ (TensorBoard runs train/ and validation/, x axis the global step:
tensorboard --logdir=WORKDIR/tensorboard).
"""

import logging
import os
import sys

from absl import app, flags

from psmm_tf import cli, configs

FLAGS = flags.FLAGS

flags.DEFINE_string("workdir", None, "Directory of the run: created, or resumed if it holds one.")
flags.DEFINE_enum("preset", "small", sorted(configs.PRESETS),
                  "Named configuration that fills every setting not given by a flag: tiny "
                  "(tests), small (2x200, CPU), medium (the paper's 2x650 PTB model), large.")
flags.DEFINE_enum("dataset", None, list(configs.DATASETS),
                  "Corpus: synthetic (generated, no files needed), ptb, wikitext2, wikitext103, "
                  "or text (a folder with train.txt, valid.txt, test.txt). Default: the "
                  "preset's (synthetic).")
flags.DEFINE_string("data_dir", None, "Folder of the corpus files (required for real corpora, "
                    "with --dataset naming their layout; read only, never written).")
flags.DEFINE_enum("train_split", None, list(configs.SPLITS),
                  "Corpus file used for training (e.g. valid where a training file is absent).")
flags.DEFINE_enum("valid_split", None, list(configs.SPLITS),
                  "Corpus file used for validation (the schedule and model selection).")
flags.DEFINE_enum("test_split", None, list(configs.SPLITS), "Corpus file used for testing.")
flags.DEFINE_integer("min_count", None, "Words seen fewer times in training become <unk>.")
flags.DEFINE_integer("max_vocab_size", None, "At most this many words in the vocabulary.")
flags.DEFINE_integer("synthetic_train_tokens", None, "Training tokens of the synthetic corpus.")
flags.DEFINE_enum("model", None, list(configs.MODEL_KINDS),
                  "psmm (pointer sentinel-LSTM), lstm (softmax-only baseline, same backbone) "
                  "or pointer_softmax (Gulcehre et al.'s switch instead of the sentinel).")
flags.DEFINE_integer("embedding_dim", None, "Width of the word embedding.")
flags.DEFINE_enum("softmax", None, ["full", "sampled", "cnn"],
                  "Output layer: full softmax, importance-sampled (training only; exact in "
                  "evaluation) or CNN softmax (Jozefowicz et al. 2016), for large vocabularies.")
flags.DEFINE_integer("num_sampled", None, "Vocabulary samples per step of --softmax=sampled|cnn.")
flags.DEFINE_integer("hidden_dim", None, "Units of every LSTM layer.")
flags.DEFINE_integer("num_layers", None, "Number of LSTM layers.")
flags.DEFINE_integer("window_size", None, "L: hidden states the pointer scores, its own included.")
flags.DEFINE_integer("num_predicted", None,
                     "T: predicted positions per training window (the BPTT length).")
flags.DEFINE_alias("bptt", "num_predicted")
flags.DEFINE_enum("pointer_memory", None, list(configs.POINTER_MEMORY_MODES),
                  "recompute: windows of C + T tokens with C = window_size - 1 context positions "
                  "recomputed (C = L - 1, T = 1 is the paper's scheme); cache: T-token windows "
                  "with the previous window's hidden states as a constant memory.")
flags.DEFINE_integer("context_length", None, "C for pointer_memory=recompute (default L - 1).")
flags.DEFINE_integer("batch_size", None, "B: contiguous streams per batch (global batch).")
flags.DEFINE_integer("epochs", None, "Maximum number of epochs (paper: 64).")
flags.DEFINE_integer("steps_per_epoch", None, "Limit of training steps per epoch.")
flags.DEFINE_integer("patience", None, "Stop after this many epochs without improvement.")
flags.DEFINE_enum("optimizer", None, ["sgd", "adam"], "Optimizer.")
flags.DEFINE_float("learning_rate", None,
                   "Initial learning rate (preset: 1.0 for sgd; 0.001 when --optimizer=adam "
                   "is given without it).")
flags.DEFINE_float("lr_decay", None, "Factor applied to the learning rate when validation "
                   "perplexity gets worse (paper: 0.5).")
flags.DEFINE_float("dropout", None, "Locked dropout on the embedding, between layers and on the "
                   "output (all three).")
flags.DEFINE_float("zoneout", None, "Zoneout probability of the LSTM states.")
flags.DEFINE_float("clip_norm", None, "Global gradient norm limit (paper: 1).")
flags.DEFINE_float("initial_gate", None, "The gate PSMM's sentinel starts near, in (0, 1); 0: the "
                   "paper's initialisation (gate near 1 / (L + 1)). Default: the preset's.")
flags.DEFINE_float("pointer_clip_norm", None, "Own global norm limit of the pointer's variables "
                   "(W, b, s); --clip_norm then applies to the rest. 0: one joint norm for all "
                   "variables (the paper's). Default: the preset's.")
flags.DEFINE_float("pointer_loss_weight", None, "Weight of eq. 9's pointer term "
                   "-log(g + sum a_i[x_i = y]) (paper: 1; 0: mixture NLL only, an ablation).")
flags.DEFINE_integer("seed", None, "Seed of initialisation and dropout.")
flags.DEFINE_enum("jit_compile", None, list(configs.JIT_COMPILE_MODES),
                  "XLA: auto (on with a GPU, off on CPU), on, off.")
flags.DEFINE_integer("checkpoint_every_steps", None, "Steps between checkpoints.")
flags.DEFINE_integer("max_eval_tokens", None, "Evaluate on at most this many tokens per split.")
flags.DEFINE_integer("eval_batch_size", None, "Streams of the evaluation (1: exact).")
flags.DEFINE_enum("strategy", "default", ["default", "mirrored", "multi_worker"],
                  "tf.distribute strategy: default (one device), mirrored (all local GPUs, or "
                  "--logical_cpus CPU devices), multi_worker (the cluster in TF_CONFIG).")
flags.DEFINE_integer("logical_cpus", 0, "Split the CPU into this many logical devices (for "
                     "--strategy=mirrored without GPUs); 0: no split.", lower_bound=0)
flags.DEFINE_bool("compare_baseline", False, "Train the model and the LSTM baseline with the "
                  "same settings (in workdir/<model> and workdir/lstm) and print both "
                  "perplexities.")
flags.DEFINE_string("input_output_gate_on", None,
                    "A trained run's workdir: train only an input-to-output gate (Takase et al. "
                    "2017) on its model.keras, frozen, with its corpus, vocabulary and settings; "
                    "--optimizer and --learning_rate default to adam and 0.001 in this mode.")
flags.DEFINE_integer("gate_embedding_dim", 300, "Width of the input-to-output gate's embedding "
                     "(with --input_output_gate_on; paper: 300).", lower_bound=1)
flags.DEFINE_float("gate_dropout", 0.5, "Dropout on the input-to-output gate's embedding (with "
                   "--input_output_gate_on; paper: 0.5).")
flags.DEFINE_integer("verbose", 1, "1: a progress bar per epoch; 0: log lines only.")

_POSITIVE = ("embedding_dim", "hidden_dim", "num_layers", "window_size", "num_predicted",
             "batch_size", "epochs", "steps_per_epoch", "patience", "checkpoint_every_steps",
             "max_eval_tokens", "eval_batch_size", "min_count", "max_vocab_size",
             "synthetic_train_tokens", "num_sampled")
for _name in _POSITIVE:
    flags.register_validator(_name, lambda v: v is None or v >= 1,
                             message="must be an integer >= 1.")
flags.register_validator("context_length", lambda v: v is None or v >= 0,
                         message="must be an integer >= 0.")
flags.register_validator("pointer_loss_weight", lambda v: v is None or 0 <= v < float("inf"),
                         message="must be a finite number >= 0.")
flags.register_validator("initial_gate", lambda v: v is None or 0 <= v < 1,
                         message="must be in [0, 1) (0: the paper's initialisation).")
flags.register_validator("pointer_clip_norm", lambda v: v is None or 0 <= v < float("inf"),
                         message="must be a finite number >= 0 (0: one joint norm).")
# inf is no limit for clipping: the global-norm scale inf / inf is NaN and every weight with it.
for _name in ("learning_rate", "clip_norm"):
    flags.register_validator(_name, lambda v: v is None or 0 < v < float("inf"),
                             message="must be a finite number > 0.")
flags.register_validator("seed", lambda v: v is None or 0 <= v < 2**32,
                         message="must be an integer in [0, 2**32) (NumPy's seed range).")
flags.register_validator("lr_decay", lambda v: v is None or 0 < v <= 1,
                         message="must be in (0, 1].")
for _name in ("dropout", "zoneout", "gate_dropout"):
    flags.register_validator(_name, lambda v: v is None or 0 <= v < 1,
                             message="must be a probability in [0, 1).")
flags.register_validator("workdir", lambda v: bool(v), message="is required: the run's folder.")
cli.define_version_flag(FLAGS)

PROGRAM = "psmm-train"


# Flags that describe the model or the corpus: an input-to-output gate run takes them from the
# trained run it wraps.
_GATE_CONFLICTS = ("preset", "dataset", "train_split", "valid_split", "test_split", "min_count",
                   "max_vocab_size", "synthetic_train_tokens", "model", "embedding_dim",
                   "softmax", "num_sampled", "hidden_dim", "num_layers", "window_size", "dropout",
                   "zoneout", "initial_gate", "compare_baseline")


def config_from_flags(flag_values=FLAGS):
    """The `ExperimentConfig` the flags describe: the preset with the given flags replaced.

    With --input_output_gate_on, the trained run's config instead, made into an input-to-output
    gate run by `gate_training.input_output_gate_config`, with the training flags given.

    Raises:
        app.UsageError: a combination of flags that is not valid (naming the flag).
    """
    f = flag_values
    if f.input_output_gate_on is None:
        for name in ("gate_embedding_dim", "gate_dropout"):
            if f[name].present:
                raise app.UsageError(f"--{name} is only used with --input_output_gate_on.")
    else:
        given = [f"--{name}" for name in _GATE_CONFLICTS if f[name].present]
        if given:
            raise app.UsageError(
                f"--input_output_gate_on trains a gate on that run's model with its corpus and "
                f"settings; {', '.join(given)} cannot be combined with it.")
    preset = configs.get_preset(f.preset)

    def given(**names):
        return {field: getattr(f, flag) for field, flag in names.items()
                if getattr(f, flag) is not None}

    model = given(kind="model", embedding_dim="embedding_dim", hidden_dim="hidden_dim",
                  num_layers="num_layers", window_size="window_size", zoneout="zoneout",
                  softmax="softmax", num_sampled="num_sampled")
    if f.dropout is not None:
        model.update(input_dropout=f.dropout, hidden_dropout=f.dropout, output_dropout=f.dropout)
    if f.seed is not None:
        model["seed"] = f.seed
    train = given(batch_size="batch_size", num_predicted="num_predicted",
                  pointer_memory="pointer_memory", context_length="context_length",
                  optimizer="optimizer", learning_rate="learning_rate", lr_decay="lr_decay",
                  clip_norm="clip_norm", pointer_clip_norm="pointer_clip_norm",
                  pointer_loss_weight="pointer_loss_weight", patience="patience",
                  max_epochs="epochs",
                  steps_per_epoch="steps_per_epoch", seed="seed", jit_compile="jit_compile",
                  checkpoint_every_steps="checkpoint_every_steps",
                  max_eval_tokens="max_eval_tokens", eval_batch_size="eval_batch_size")
    if f.pointer_clip_norm == 0:
        train["pointer_clip_norm"] = None
    if f.initial_gate is not None:
        model["initial_gate"] = f.initial_gate or None
    if f.optimizer == "adam" and f.learning_rate is None:
        train["learning_rate"] = 1e-3
    data = given(dataset="dataset", data_dir="data_dir", min_count="min_count",
                 max_vocab_size="max_vocab_size", synthetic_train_tokens="synthetic_train_tokens",
                 train_split="train_split", valid_split="valid_split", test_split="test_split")
    if f.input_output_gate_on is not None:
        preset = _gate_base_config(f)
        model = {"seed": f.seed} if f.seed is not None else {}
        train.setdefault("optimizer", "adam")
        if f.learning_rate is None:
            train["learning_rate"] = 1e-3 if train["optimizer"] == "adam" else 1.0
    try:
        config = preset.replace(model=model, train=train, data=data)
    except ValueError as err:
        raise app.UsageError(f"Invalid flag value: {err}") from None
    if config.data.dataset != "synthetic" and not config.data.data_dir:
        raise app.UsageError(
            f"--data_dir is required for --dataset={config.data.dataset}: the folder holding "
            "the corpus files (e.g. ptb.train.txt, ptb.valid.txt, ptb.test.txt).")
    if config.data.dataset == "synthetic" and f.data_dir is not None:
        # The generator would write its splits there, over a user's files.
        if f.input_output_gate_on is not None:
            reason = "the run of --input_output_gate_on trained on the synthetic corpus"
        elif f.dataset is None:
            reason = ("--dataset is not given, so the preset's synthetic corpus would be "
                      "generated; name the layout of that folder's files with --dataset="
                      "ptb|wikitext2|wikitext103|text")
        else:
            reason = "--dataset=synthetic is generated into the workdir"
        raise app.UsageError(f"--data_dir={f.data_dir} is refused: {reason}. Nothing is "
                             "written into a --data_dir.")
    # Flags the chosen corpus would ignore: refused rather than dropped silently.
    if config.data.dataset == "synthetic":
        ignored = [f"--{n}" for n in ("min_count", "max_vocab_size") if f[n].present]
        if ignored:
            raise app.UsageError(
                f"{', '.join(ignored)} cannot be used with --dataset=synthetic, whose vocabulary "
                "is the generator's (all its words); they apply to the real corpora.")
    elif f["synthetic_train_tokens"].present:
        raise app.UsageError(f"--synthetic_train_tokens is only used with --dataset=synthetic, "
                             f"not --dataset={config.data.dataset}.")
    if (config.train.pointer_memory == "recompute" and config.train.context_length is not None
            and config.train.context_length >= config.model.window_size):
        raise app.UsageError(
            f"--context_length={config.train.context_length} must be < --window_size="
            f"{config.model.window_size}: the pointer never reaches further back.")
    return config


def _gate_base_config(f):
    """The input-to-output gate config on --input_output_gate_on's run (before other flags)."""
    from psmm_tf.training import gate_training

    try:
        return gate_training.input_output_gate_config(
            f.input_output_gate_on, embedding_dim=f.gate_embedding_dim, dropout=f.gate_dropout)
    except (FileNotFoundError, ValueError) as err:
        raise app.UsageError(f"--input_output_gate_on={f.input_output_gate_on}: {err}") from None


def make_strategy(name, logical_cpus=0):
    """The `tf.distribute.Strategy` of --strategy (None for "default")."""
    import tensorflow as tf

    if logical_cpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * logical_cpus)
    if name == "mirrored":
        devices = None
        if logical_cpus and not tf.config.list_physical_devices("GPU"):
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    return None


def _main(argv):
    if len(argv) > 1:
        cli.usage_error(PROGRAM, f"Unexpected arguments: {' '.join(argv[1:])}")
    # TensorFlow's own INFO lines (one per checkpoint shard) would drown the progress.
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    try:
        config = config_from_flags()
        if FLAGS.strategy == "multi_worker" and not os.environ.get("TF_CONFIG"):
            raise app.UsageError("--strategy=multi_worker needs the cluster in TF_CONFIG.")
    except app.UsageError as err:
        # The message alone (app.run would bury it under the whole help text); nothing written.
        cli.usage_error(PROGRAM, err)
    strategy = make_strategy(FLAGS.strategy, FLAGS.logical_cpus)
    from psmm_tf.training import checkpointing, comparison, run_setup, train_lib

    try:
        if FLAGS.compare_baseline:
            results = comparison.compare_with_baseline(config, FLAGS.workdir, strategy=strategy,
                                                       verbose=FLAGS.verbose)
            print(comparison.format_comparison(results), flush=True)
            return
        results = train_lib.run(config, FLAGS.workdir, strategy=strategy, verbose=FLAGS.verbose)
    except (run_setup.RunRefusedError, checkpointing.CheckpointRestoreError) as err:
        sys.exit(f"FATAL {err}")  # the message names the file or setting; no stack dump
    if results:
        print(f"best valid perplexity {results['best_valid_perplexity']:.2f}"
              + (f", test perplexity {results['test_perplexity']:.2f}"
                 if "test_perplexity" in results else ""), flush=True)
        if "pointer" in results:
            from psmm_tf.evaluation import pointer_diagnostics

            print("pointer diagnostics (valid):")
            for line in pointer_diagnostics.format_pointer_diagnostics(results["pointer"]):
                print(f"  {line}")


# What the preset's None means, where a flag's help does not say it.
_UNSET = {"context_length": "unset (window_size - 1)", "steps_per_epoch": "unset (whole epochs)",
          "max_eval_tokens": "unset (whole splits)", "max_vocab_size": "unset (no limit)"}


def preset_defaults(preset_name):
    """{flag name: the value preset `preset_name` gives it when the flag is left out}."""
    config = configs.get_preset(preset_name)
    m, t, d = config.model, config.train, config.data
    dropouts = (m.input_dropout, m.hidden_dropout, m.output_dropout)
    values = {
        "dataset": d.dataset, "train_split": d.train_split, "valid_split": d.valid_split,
        "test_split": d.test_split, "min_count": d.min_count, "max_vocab_size": d.max_vocab_size,
        "synthetic_train_tokens": d.synthetic_train_tokens, "model": m.kind,
        "embedding_dim": m.embedding_dim, "softmax": m.softmax, "num_sampled": m.num_sampled,
        "hidden_dim": m.hidden_dim, "num_layers": m.num_layers, "window_size": m.window_size,
        "zoneout": m.zoneout, "initial_gate": m.initial_gate or 0,
        "dropout": (dropouts[0] if len(set(dropouts)) == 1
                    else "{}/{}/{} (input/hidden/output)".format(*dropouts)),
        "num_predicted": t.num_predicted, "pointer_memory": t.pointer_memory,
        "context_length": t.context_length, "batch_size": t.batch_size,
        "epochs": t.max_epochs, "steps_per_epoch": t.steps_per_epoch, "patience": t.patience,
        "optimizer": t.optimizer, "learning_rate": t.learning_rate, "lr_decay": t.lr_decay,
        "clip_norm": t.clip_norm, "pointer_clip_norm": t.pointer_clip_norm or 0,
        "pointer_loss_weight": t.pointer_loss_weight, "seed": t.seed,
        "jit_compile": t.jit_compile, "checkpoint_every_steps": t.checkpoint_every_steps,
        "max_eval_tokens": t.max_eval_tokens, "eval_batch_size": t.eval_batch_size,
    }
    return {name: _UNSET.get(name, "unset") if value is None else value
            for name, value in values.items()}


def _preset_in(argv):
    """The --preset of a command line (the flag's default if absent or not a preset)."""
    args = list(argv[1:])
    for i, arg in enumerate(args):
        if arg.startswith("--preset="):
            name = arg.split("=", 1)[1]
        elif arg == "--preset" and i + 1 < len(args):
            name = args[i + 1]
        else:
            continue
        if name in configs.PRESETS:
            return name
    return FLAGS["preset"].default


def help_notes(argv):
    """Help notes of psmm-train: "default from --preset=NAME: VALUE" for the preset's flags."""
    preset = _preset_in(argv)
    return {name: f"default from --preset={preset}: {value}"
            for name, value in preset_defaults(preset).items()}


def main(argv=None):
    """Console-script entry point (`psmm-train`)."""
    cli.run(_main, program=PROGRAM, doc=__doc__, module_name=__name__, notes=help_notes,
            argv=argv)


if __name__ == "__main__":
    main()
