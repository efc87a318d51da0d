r"""psmm-train: trains a pointer sentinel mixture model (or its LSTM baseline); resumes runs.

Usage examples:
  # PSMM and its LSTM baseline on the synthetic corpus (the README's quick start).
  psmm-train --preset=small --dataset=synthetic --epochs=2 --compare_baseline \
      --workdir=/tmp/psmm_quickstart

  # The paper's Penn Treebank model (2x650, window 100) in Zaremba's medium regime.
  psmm-train --preset=medium --dataset=ptb --data_dir=/data/ptb --workdir=/tmp/ptb_psmm

  # An input-to-output gate (Takase et al. 2017) on that run's frozen model: Adam, lr 0.001.
  psmm-train --input_output_gate_on=/tmp/ptb_psmm --workdir=/tmp/ptb_psmm_gate

  # A character-LSTM output layer (Jozefowicz et al. 2016) on that run's frozen model.
  psmm-train --char_output_on=/tmp/ptb_psmm --workdir=/tmp/ptb_psmm_chars

  # Two GPUs of one machine, or the workers listed in TF_CONFIG.
  psmm-train --preset=medium --dataset=ptb --data_dir=/data/ptb --strategy=mirrored ...

  # Any config field without a flag; --help gives the preset's value of every flag.
  psmm-train --preset=medium --override=train.keep_checkpoints=5 --workdir=...

A named preset fills every setting a flag does not give (the help below names its value). A
--workdir that already holds a run resumes it (same settings; --epochs may grow); it holds
config.json, vocab.txt, checkpoints/, model.keras (the best model by validation perplexity),
history.json, steps.jsonl, results.json and tensorboard/ (tensorboard --logdir=WORKDIR/...).
"""

import logging
import os
import sys

from absl import app, flags

from psmm_tf import cli, configs
from psmm_tf.trainers import char_output_flags, config_flags

FLAGS = flags.FLAGS
PROGRAM = "psmm-train"

flags.DEFINE_string("workdir", None, "Directory of the run: created, or resumed if it holds one.")
flags.DEFINE_enum("preset", "small", sorted(configs.PRESETS),
                  "Named configuration that fills every setting not given by a flag: tiny "
                  "(tests), small (2x200, CPU), medium (the paper's 2x650 PTB model), large.")
config_flags.define_config_flags(FLAGS, __name__)
flags.DEFINE_enum("strategy", "default", ["default", "mirrored", "multi_worker"],
                  "tf.distribute strategy: default (one device), mirrored (all local GPUs, or "
                  "--logical_cpus CPU devices), multi_worker (the cluster in TF_CONFIG).")
flags.DEFINE_integer("logical_cpus", 0, "Split the CPU into this many logical devices (for "
                     "--strategy=mirrored without GPUs); 0: no split.", lower_bound=0)
flags.DEFINE_bool("compare_baseline", False, "Train the model and the LSTM baseline with the "
                  "same settings (in workdir/<model> and workdir/lstm); print both.")
config_flags.define_gate_flags(FLAGS, __name__)
char_output_flags.define_flags(FLAGS, __name__)
flags.DEFINE_integer("verbose", 1, "1: a progress bar per epoch; 0: log lines only.")
flags.DEFINE_bool("restart", False, "Train the workdir's run again from scratch, its outputs "
                  "moved into <workdir>/previous_run_<N>/ (needed once its checkpoints are lost).")
flags.register_validator("workdir", bool, message="is required: the run's folder.")
cli.define_version_flag(FLAGS)


def config_from_flags(f=FLAGS):
    """The `ExperimentConfig` the flags describe: the preset (or, with --input_output_gate_on,
    the trained run's gate config) with the given flags set. Raises app.UsageError."""
    try:
        overrides = config_flags.config_overrides(f)
        char_output_flags.refuse_without_base(f)
        if f.input_output_gate_on is None:
            base = configs.get_preset(f.preset)
            for name in [n for n in ("gate_embedding_dim", "gate_dropout") if f[n].present]:
                raise ValueError(f"--{name} is only used with --input_output_gate_on.")
        else:
            base = config_flags.gate_base_config(f, overrides)
        config = base.replace(**overrides)
        config_flags.check_combination(config, f)
    except (ValueError, FileNotFoundError) as err:
        raise app.UsageError(str(err)) from None
    return config


def _main(argv):
    if len(argv) > 1:
        cli.usage_error(PROGRAM, f"Unexpected arguments: {' '.join(argv[1:])}")
    cli.require_tensorflow_backend(PROGRAM)
    logging.getLogger("tensorflow").setLevel(logging.WARNING)  # no INFO line per shard
    chars = FLAGS.char_output_on is not None
    try:
        config = char_output_flags.char_output_config(FLAGS) if chars else config_from_flags()
        if FLAGS.strategy == "multi_worker" and not os.environ.get("TF_CONFIG"):
            raise app.UsageError("--strategy=multi_worker needs the cluster in TF_CONFIG.")
    except (app.UsageError, ValueError) as err:  # the message alone; nothing written
        cli.usage_error(PROGRAM, err)
    config_flags.configure_native()
    from psmm_tf.training import checkpointing, comparison, distribution, run_setup, train_lib

    options = dict(strategy=distribution.make_strategy(FLAGS.strategy, FLAGS.logical_cpus),
                   verbose=FLAGS.verbose, restart=FLAGS.restart)
    try:
        if chars:
            char_output_flags.train(config, FLAGS.workdir, FLAGS.verbose, FLAGS.restart)
        elif FLAGS.compare_baseline:
            results = comparison.compare_with_baseline(config, FLAGS.workdir, **options)
            print(comparison.format_comparison(results), flush=True)
        else:
            results = train_lib.run(config, FLAGS.workdir, **options)
            if results:  # empty on the workers that are not the chief
                print(train_lib.format_results(results), flush=True)
    except (run_setup.RunRefusedError, checkpointing.CheckpointRestoreError) as err:
        sys.exit(f"FATAL {err}")  # the message names the file or setting; no stack dump


def main(argv=None):
    """Console-script entry point (`psmm-train`)."""
    cli.run(_main, program=PROGRAM, doc=__doc__, module_name=__name__, argv=argv,
            notes=lambda args: config_flags.preset_notes(cli.flag_in(args, "preset", FLAGS)))


if __name__ == "__main__":
    main()
