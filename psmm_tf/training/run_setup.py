"""Preparing a run's workdir: the resolved config, the vocabulary, and resuming checks."""

import dataclasses
from pathlib import Path

import keras
import tensorflow as tf

from psmm_tf.configs import ExperimentConfig
from psmm_tf.data.vocabulary import Vocabulary
from psmm_tf.training import checkpointing, corpus_setup, distribution

# Fields a resumed run may change: they affect how long or how fast it runs, not what it learns.
RESUMABLE_CHANGES = frozenset({
    "train.max_epochs", "train.jit_compile", "train.checkpoint_every_steps",
    "train.keep_checkpoints",
})


def resolve_jit_compile(mode):
    """"auto" -> XLA where a GPU is present (the scan LSTM compiles well there; on a CPU XLA
    measured 1.6-1.7x slower for a 2x650 LSTM), "on" -> True, "off" -> False."""
    if mode == "auto":
        return bool(tf.config.list_logical_devices("GPU"))
    return mode == "on"


def make_optimizer(train_config):
    """The Keras optimizer of `train_config` ("sgd" or "adam") at its initial learning rate."""
    if train_config.optimizer == "adam":
        return keras.optimizers.Adam(learning_rate=train_config.learning_rate)
    return keras.optimizers.SGD(learning_rate=train_config.learning_rate)


def config_differences(old, new):
    """Dotted names of the fields where two `ExperimentConfig`s differ."""
    old_dict, new_dict = dataclasses.asdict(old), dataclasses.asdict(new)
    return sorted(f"{part}.{name}" for part in old_dict for name in old_dict[part]
                  if old_dict[part][name] != new_dict[part].get(name))


def prepare_workdir(config, workdir, strategy):
    """Resolves the config against the data and the workdir, and writes the run's files.

    The vocabulary size is set from the data and a missing model seed from `train.seed`. A
    workdir that already holds a run must have been started with the same config, except for
    the fields in `RESUMABLE_CHANGES`; its `vocab.txt` is reused. A new run with
    `model.base_model` (an input-to-output gate run) takes the vocabulary of the base model's
    run, `<folder of base_model>/vocab.txt`.

    Args:
        config: `ExperimentConfig` (e.g. from flags).
        workdir: str or path.
        strategy: the run's `tf.distribute.Strategy` (only its chief writes files).

    Returns:
        `(config, corpus)`: the resolved `ExperimentConfig` and the `corpus_setup.Corpus`.

    Raises:
        ValueError: the workdir holds a run with another config.
        FileNotFoundError: `model.base_model` has no `vocab.txt` beside it.
    """
    workdir = Path(workdir)
    chief = distribution.is_chief(strategy)
    config_path = workdir / checkpointing.CONFIG_FILE
    vocab_path = workdir / checkpointing.VOCAB_FILE
    stored = ExperimentConfig.from_json(config_path.read_text()) if config_path.is_file() else None
    has_vocabulary = vocab_path.is_file()
    vocabulary = Vocabulary.load(vocab_path) if has_vocabulary else _base_vocabulary(config)
    scratch = workdir / "synthetic_data"
    if not chief:
        scratch = workdir / f".{distribution.worker_name(strategy)}" / "synthetic_data"
    corpus = corpus_setup.load_corpus(config.data, scratch_dir=scratch, vocabulary=vocabulary)
    seed = config.model.seed if config.model.seed is not None else config.train.seed
    config = config.replace(model={"vocab_size": len(corpus.vocabulary), "seed": seed})
    if stored is not None:
        changed = [name for name in config_differences(stored, config)
                   if name not in RESUMABLE_CHANGES]
        if changed:
            details = ", ".join(f"{name}: {_field(stored, name)!r} -> {_field(config, name)!r}"
                                for name in changed)
            raise ValueError(
                f"{workdir} holds a run with another config ({details}). Resume it with the "
                f"same settings, or start the new run in another workdir."
            )
    if chief:
        workdir.mkdir(parents=True, exist_ok=True)
        config_path.write_text(config.to_json())
        if not has_vocabulary:
            corpus.vocabulary.save(vocab_path)
    return config, corpus


def _base_vocabulary(config):
    """The vocabulary of the run whose model an input-to-output gate run wraps (else None)."""
    if config.model.base_model is None:
        return None
    path = Path(config.model.base_model).parent / checkpointing.VOCAB_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"No {path}: an input-to-output gate run reads the vocabulary of the run that "
            f"trained its base model {config.model.base_model}.")
    return Vocabulary.load(path)


def _field(config, dotted):
    part, name = dotted.split(".")
    return getattr(getattr(config, part), name)
