"""psmm-train's --char_output_on mode: a character-LSTM output layer trained on a run's frozen
model (`psmm_tf.training.char_output_training`): its flags, its config and its run."""

import sys

from absl import flags

from psmm_tf.trainers.config_flags import CHECKS, OVERRIDE_FLAG, all_flags

# Flags a --char_output_on run takes, and the `CharOutputConfig` field each sets.
CHAR_OUTPUT_FLAGS = {"epochs": "epochs", "learning_rate": "learning_rate", "seed": "seed",
                     "steps_per_epoch": "steps_per_epoch", "max_eval_tokens": "max_eval_tokens",
                     "batch_size": "batch_size", "num_predicted": "num_predicted",
                     "clip_norm": "clip_norm", "dropout": "dropout", "data_dir": "data_dir",
                     "char_output_units": "units", "char_output_word_length": "max_word_length",
                     "char_output_words_per_update": "words_per_update",
                     "char_output_shuffle_words": "shuffle_words",
                     "char_output_char_dropout": "char_dropout"}
_OWN_FLAGS = ("char_output_units", "char_output_word_length", "char_output_words_per_update",
              "char_output_shuffle_words", "char_output_char_dropout")


def define_flags(flag_values, module_name):
    """Defines --char_output_on and the output layer's own flags."""
    common = dict(flag_values=flag_values, module_name=module_name)
    flags.DEFINE_string(
        "char_output_on", None, "A trained run's workdir: train only a character-LSTM output "
        "layer (Jozefowicz et al. 2016's Char LSTM predictions) on its model.keras, frozen, "
        "with its corpus; takes --" + ", --".join(CHAR_OUTPUT_FLAGS) + " (--learning_rate: "
        "Adam's, default 0.003; --batch_size and --num_predicted: the windows the frozen "
        "model reads).",
        **common)
    flags.DEFINE_integer("char_output_units", 256, "Units of the character-LSTM output layer "
                         "(with --char_output_on).", lower_bound=1, **common)
    flags.DEFINE_integer("char_output_word_length", 32, "Characters the character-LSTM output "
                         "layer spells per word, its two markers included (with "
                         "--char_output_on); a longer word keeps its first bytes.",
                         lower_bound=3, **common)
    flags.DEFINE_integer("char_output_words_per_update", 128, "Words of one update of the "
                         "character-LSTM output layer, drawn at random from the shuffle buffer "
                         "(with --char_output_on).", lower_bound=1, **common)
    flags.DEFINE_integer("char_output_shuffle_words", 200_000, "Words of the frozen model's "
                         "consecutive training windows shuffled together into updates (with "
                         "--char_output_on; at least the training split's size: one shuffle "
                         "over the whole epoch).", lower_bound=1, **common)
    flags.DEFINE_float("char_output_char_dropout", 0.0, "Dropout on the character LSTM's "
                       "inputs and outputs, one mask per word across its characters (with "
                       "--char_output_on; --dropout is the one on h_t as the output layer "
                       "reads it).", **common)
    flags.register_validator("char_output_char_dropout", CHECKS["probability"][0],
                             message=CHECKS["probability"][1], flag_values=flag_values)


def refuse_without_base(flag_values):
    """ValueError if the output layer's flags are given without --char_output_on."""
    for name in [n for n in _OWN_FLAGS if flag_values[n].present]:
        raise ValueError(f"--{name} is only used with --char_output_on.")


def char_output_config(flag_values):
    """The `CharOutputConfig` of --char_output_on. Flags that describe another model, corpus
    or training scheme are refused (ValueError naming them)."""
    from psmm_tf.training.char_output_training import CharOutputConfig

    f = flag_values
    given = [f"--{spec.name}" for spec in all_flags()
             if f[spec.name].present and spec.name not in CHAR_OUTPUT_FLAGS]
    given += [f"--{name}" for name in ("preset", "compare_baseline", "input_output_gate_on",
                                       "gate_embedding_dim", "gate_dropout", OVERRIDE_FLAG)
              if f[name].present]
    if f["strategy"].value != "default":
        given.append("--strategy (it trains on one device)")
    if given:
        raise ValueError(f"--char_output_on trains a character-LSTM output layer on that run's "
                         f"frozen model with its corpus; {', '.join(given)} cannot be combined "
                         f"with it (it takes --{', --'.join(CHAR_OUTPUT_FLAGS)}).")
    fields = {field: f[name].value for name, field in CHAR_OUTPUT_FLAGS.items()
              if f[name].present}
    return CharOutputConfig(base_workdir=str(f["char_output_on"].value), **fields)


def train(config, workdir, verbose, restart=False):
    """Trains the output layer of `config` in `workdir` (`restart`: --restart, its previous
    training outputs moved into previous_run_<N>/ first); prints its numbers. A base run that
    cannot be loaded exits with the message (psmm-train's other refusals are its own)."""
    from psmm_tf.evaluation.trained_run import RunLoadError
    from psmm_tf.training import char_output_training

    try:
        results = char_output_training.run(config, workdir, verbose=verbose, restart=restart)
    except RunLoadError as err:
        sys.exit(f"FATAL {err}")
    print(char_output_training.format_results(results), flush=True)
