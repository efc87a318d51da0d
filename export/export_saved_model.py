r"""psmm-export: a trained language model as a TF Serving SavedModel, `<export_base>/<N>/`.

Usage examples:
  # A finished run's model.keras (a run still training: its newest checkpoint) as the next
  # version of /models/psmm.
  psmm-export --workdir=/runs/ptb --export_base=/models/psmm [--model_source=best|latest]

  # A .keras model with its vocabulary and config, as version 3 (or --checkpoint=PREFIX).
  psmm-export --keras_model=/runs/ptb/model.keras --vocab=/runs/ptb/vocab.txt \
      --config=/runs/ptb/config.json --export_base=/models/psmm --model_version=3

  # With a neural cache (theta and lambda tuned by psmm-evaluate --cache_grid).
  psmm-export --workdir=/runs/ptb --export_base=/models/psmm_cache \
      --cache_window=2000 --cache_theta=0.3 --cache_lambda=0.1

A plain SavedModel (`psmm_tf.export.export_lib`); the output names the model (--model_source).
Serving: docs/serving.md (models.config and batching_parameters.txt are installed beside this).
"""

import sys

from absl import app, flags

from psmm_tf import cli
from psmm_tf.export import export_lib
from psmm_tf.export.export_lib import cache_settings, export, load_model  # noqa: F401

EXPORT_FLAGS = FLAGS = flags.FlagValues()  # own registry: names shared with psmm-train's flags
PROGRAM, CACHE_FLAGS = "psmm-export", ("cache_window", "cache_theta", "cache_lambda")
for _name, _help in (("workdir", "Training workdir (config.json, vocab.txt, model.keras, "
                                 "checkpoints/)."),
        ("keras_model", "A .keras file of the model, instead of --workdir."),
        ("checkpoint", "A checkpoint prefix or folder (model under key `model`), with --config "
                       "and --vocab, instead of --workdir."),
        ("config", "config.json of the run (default: the workdir's)."),
        ("vocab", "Vocabulary file (default: the workdir's vocab.txt)."),
        ("export_base", "Folder of the versions; created if missing.")):
    flags.DEFINE_string(_name, None, _help, flag_values=FLAGS)
flags.DEFINE_enum("model_source", None, ["best", "latest"], "With --workdir: best (model.keras, "
                  "the gate calibrated) or latest (the newest checkpoint). Default: best for a "
                  "finished run and an input-to-output gate run, else latest.", flag_values=FLAGS)
flags.DEFINE_integer("model_version", None, "Version folder to write (default: the next "
                     "integer).", flag_values=FLAGS)
flags.register_validator("model_version", lambda v: v is None or 1 <= v < 2**63,
                         message="must be an integer in [1, 2**63) (TF Serving loads positive "
                         "int64 version folders only).", flag_values=FLAGS)
flags.DEFINE_integer("max_request_tokens", export_lib.serving_module.DEFAULT_MAX_TOKENS,
                     "Most tokens one request may hold (batch x longest text, 2 to 2**31 - 1: "
                     "int32 request sizes); a larger request is refused naming its input.",
                     lower_bound=2, upper_bound=export_lib.MAX_REQUEST_TOKENS, flag_values=FLAGS)
flags.DEFINE_string("model_name", "psmm", "Model name in the warmup requests.", flag_values=FLAGS)
cli.define_version_flag(FLAGS)
flags.DEFINE_integer("cache_window", None, "Export with a neural cache (Grave et al. 2017) of "
                     "this many previous hidden states.", flag_values=FLAGS)
flags.DEFINE_float("cache_theta", None, "Flatness of the cache distribution, >= 0 (with "
                   f"--cache_window; default {export_lib.DEFAULT_CACHE_THETA}).", flag_values=FLAGS)
flags.DEFINE_float("cache_lambda", None, "Interpolation weight of the cache in [0, 1) (with "
                   f"--cache_window; default {export_lib.DEFAULT_CACHE_LAMBDA}).",
                   flag_values=FLAGS)


def _check_cache_flags(values):
    try:
        cache_settings(*(values[name] for name in CACHE_FLAGS))
    except ValueError as error:  # names the flag
        raise flags.ValidationError(str(error)) from None
    return True


flags.register_multi_flags_validator(CACHE_FLAGS, _check_cache_flags, flag_values=FLAGS)


def _fail(message):
    sys.stderr.write(f"psmm-export: {message}\n")
    sys.exit(1)


def _main(argv):
    if len(argv) > 1:
        cli.usage_error(PROGRAM, f"Unexpected arguments: {' '.join(argv[1:])}")
    if FLAGS.export_base is None:
        cli.usage_error(PROGRAM, "--export_base is required: the folder of the versions.")
    cli.require_tensorflow_backend(PROGRAM)
    settings = cache_settings(FLAGS.cache_window, FLAGS.cache_theta, FLAGS.cache_lambda)
    try:
        export_lib.check_export_base(FLAGS.export_base, FLAGS.model_version)  # before loading
        model, vocab, config_json, source = load_model(
            FLAGS.workdir, FLAGS.keras_model, FLAGS.checkpoint, FLAGS.config, FLAGS.vocab,
            FLAGS.model_source)
    except (ValueError, OSError) as err:  # the message names the flag or the file
        _fail(err)
    try:
        path = export(export_lib.with_cache(model, settings), vocab, FLAGS.export_base,
                      FLAGS.model_version, FLAGS.model_name, config_json,
                      FLAGS.max_request_tokens)
    except OSError as err:  # the version exists, or the base cannot be created or written
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        _fail(f"--export_base={FLAGS.export_base}: {err.strerror or err}{where}")
    print(f"Exported {path}\nmodel: {source}\n{export_lib.describe_signatures(path)}")


def _parse_flags(argv):
    """Parses `argv` into EXPORT_FLAGS (app.run's flags_parser); see `psmm_tf.cli`."""
    old_version = [arg for arg in argv[1:] if arg.startswith("--version=")
                   and arg.split("=", 1)[1].isdigit()]
    if old_version:  # --version=N for the version folder is --model_version=N
        cli.usage_error(PROGRAM, f"{old_version[0]}: --version prints the psmm_tf version; the "
                        "version folder to write is --model_version=N.")
    return cli.parse(argv, FLAGS, program=PROGRAM, doc=__doc__, module_name=__name__)


def main(argv=None):
    """Console-script entry point (`psmm-export`)."""
    app.run(cli.exit_when_out_of_resources(_main, PROGRAM), argv=argv, flags_parser=_parse_flags)


if __name__ == "__main__":
    main()
