"""The one command-line convention of psmm-train, psmm-evaluate, psmm-export and psmm-score.

Every program defines its flags with absl in its own module (psmm-export and psmm-score in a
`flags.FlagValues` of their own: a test process imports them beside psmm-train, whose flags
share names with theirs) and parses them with `parse` (or `run`, around `absl.app.run`):

- `--help` (`-h`, `--helpshort`): the module docstring (what the program does, then a usage
  example block), then the program's own flags with their help text and effective default
  (where a default comes from elsewhere, e.g. psmm-train's preset, the note says so and gives
  the value: "default from --preset=small: 35"); exit status 0.
- `--helpfull`: the same, then absl's own flags.
- `--version`: "<program> (psmm_tf) <version>"; exit status 0.
- A flag error: "FATAL Flags error: <message>" and "Try <program> --help." on stderr, exit
  status 1 (psmm-score: 2, as its other input errors).

This module imports absl only (no TensorFlow): a refused command line costs no TF start.
"""

import errno
import functools
import re
import sys

from absl import app, flags

from psmm_tf import __version__

HELP_ARGS = ("-h", "-?", "--help", "--helpshort")
HELPFULL_ARGS = ("--helpfull",)
VERSION_ARG = "--version"
VERSION_HELP = "Print the program's name and the psmm_tf version, then exit."
# OS errors of a full disk or quota (EFBIG: a file-size limit), and the words TensorFlow's
# file system errors (ResourceExhaustedError, not an OSError) give for them.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
DISK_FULL_WORDS = ("No space left on device", "Disk quota exceeded", "File too large")
# What a program adds to its out-of-space message.
DISK_FULL_ADVICE = {"psmm-train": " (it resumes the run from its last checkpoint)"}
INTERRUPT_ADVICE = {"psmm-train": "; the same command resumes the run from its last checkpoint"}
# The exit status of a program stopped by Ctrl-C (SIGINT), as a shell reports it: 128 + 2.
INTERRUPTED_STATUS = 130


def version_line(program):
    """`<program> (psmm_tf) <version>`."""
    return f"{program} (psmm_tf) {__version__}"


def define_version_flag(flag_values=flags.FLAGS):
    """Defines --version (handled by `parse` before any other flag) in `flag_values`."""
    flags.DEFINE_bool("version", False, VERSION_HELP, flag_values=flag_values)


def module_key(module_name):
    """The name absl registers a module's flags under (`sys.argv[0]` for a script)."""
    return sys.argv[0] if module_name == "__main__" else module_name


def own_flags(flag_values, module_name):
    """The flags `module_name` defined in `flag_values`, in definition order of absl's listing."""
    by_module = flag_values.flags_by_module_dict()
    found = []
    for key in (module_key(module_name), __name__):
        for flag in by_module.get(key, []):
            if flag not in found:
                found.append(flag)
    return sorted(found, key=lambda f: f.name)


def describe_flag(flag, note=None):
    """absl's help layout of one flag; `note` (e.g. the preset's value) replaces its default."""
    name = f"--[no]{flag.name}" if flag.boolean else f"--{flag.name}"
    lines = [flags.text_wrap(f"{name}: {flag.help}", indent="    ", firstline_indent="  ")]
    details = []
    if note is not None:
        details.append(note)
    elif flag.default is not None:
        details.append(f"default: {flag.default_as_str}")
    kind = {"int": "an integer", "float": "a number", "list": "a comma-separated list"}.get(
        flag.flag_type())
    if kind:
        details.append(kind)
    if details:
        lines.append(flags.text_wrap(f"({'; '.join(details)})", indent="    "))
    return "\n".join(lines)


def help_text(doc, flag_values, module_name, notes=None, full=False):
    """The docstring, then the program's own flags (with `notes`), then absl's with `full`."""
    notes = notes or {}
    flag_lines = [describe_flag(flag, notes.get(flag.name))
                  for flag in own_flags(flag_values, module_name)]
    parts = [doc.strip("\n"), "", "flags:", *flag_lines]
    if full:
        parts += ["", "absl flags:", flag_values.get_help()]
    else:
        parts += ["", "Try --helpfull to see absl's own flags too."]
    return "\n".join(parts) + "\n"


def _before_separator(args):
    return args[:args.index("--")] if "--" in args else args


def parse(argv, flag_values, *, program, doc, module_name, notes=None, error_status=1):
    """Parses `argv` (program name first) into `flag_values`; returns the remaining arguments.

    Handles --help, --helpfull and --version first (printing to stdout, exit 0), so that a
    required flag's validator does not refuse them. A flag error exits with `error_status`.

    Args:
        notes: None, or a callable of `argv` giving {flag name: text replacing its default
            in the help}, e.g. psmm-train's "default from --preset=small: 35".
    """
    args = _before_separator(list(argv[1:]))
    full = any(arg in HELPFULL_ARGS for arg in args)
    if full or any(arg in HELP_ARGS for arg in args):
        sys.stdout.write(help_text(doc, flag_values, module_name,
                                   notes(argv) if notes else None, full=full))
        sys.exit(0)
    if VERSION_ARG in args:
        print(version_line(program))
        sys.exit(0)
    if flag_values is not flags.FLAGS:
        flag_values.unparse_flags()  # each call starts from the defaults (tests call main)
    try:
        remaining = flag_values(list(argv))
    except flags.Error as err:
        sys.stderr.write(f"FATAL Flags error: {err}\nTry {program} --help.\n")
        sys.exit(error_status)
    except UnicodeDecodeError as err:  # absl reads a --flagfile as text (the locale's)
        files = [f"--flagfile={value}" for value in _flag_values(args, "flagfile")]
        sys.stderr.write(f"FATAL Flags error: {', '.join(files) or '--flagfile'}: a flag file "
                         f"that is not text ({err.encoding}: {err.reason}); expected a text "
                         f"file of flags, one per line.\nTry {program} --help.\n")
        sys.exit(error_status)
    if flag_values is not flags.FLAGS:
        flags.FLAGS.mark_as_parsed()  # absl logging reads the global flags
    return remaining


def _flag_values(args, name):
    """The values given to `--name` in `args`, as `--name=V` or `--name V`."""
    values = []
    for i, arg in enumerate(args):
        if arg.startswith(f"--{name}="):
            values.append(arg.split("=", 1)[1])
        elif arg == f"--{name}" and i + 1 < len(args):
            values.append(args[i + 1])
    return values


def flag_in(argv, name, flag_values):
    """The value of `--name` on a command line (e.g. --preset, before parsing, for --help
    notes), or the flag's default when it is absent or not one of an enum's values."""
    given = _flag_values(_before_separator(list(argv[1:])), name)
    value = given[-1] if given else None
    flag = flag_values[name]
    enum_values = getattr(flag.parser, "enum_values", None)
    if value is None or (enum_values and value not in enum_values):
        return flag.default
    return value


def require_tensorflow_backend(program):
    """Exits (status 1) unless Keras runs on TensorFlow: the trainers, evaluation and export
    use tf.data, tf.distribute, TensorFlow checkpoints and SavedModels."""
    import keras

    backend = keras.backend.backend()
    if backend != "tensorflow":
        sys.exit(f"FATAL {program} runs on Keras' TensorFlow backend (tf.data, tf.distribute, "
                 f"TensorFlow checkpoints and SavedModels), but the Keras backend is "
                 f"{backend!r} (KERAS_BACKEND). Unset KERAS_BACKEND or set it to tensorflow; "
                 f"on {backend}, the models load and score (keras.saving.load_model) and "
                 f"psmm_tf.jax_train_step.JaxTrainStep trains from Python on the windows of "
                 f"psmm_tf.data.iter_training_windows. Nothing was written.")


def usage_error(program, message):
    """Exits with a refused combination of flags: the message and where the help is."""
    sys.exit(f"FATAL Flags error: {message}\nTry {program} --help.")


def disk_full_detail(error):
    """What ran out (the file and the OS's words) when `error` is a write that failed for want
    of disk space or quota; None for any other error."""
    if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror}"
    message = _op_error_line(error)
    if message is not None and any(words in message for words in DISK_FULL_WORDS):
        return message
    return None


def out_of_memory_detail(error):
    """TensorFlow's words when `error` is an allocation that did not fit in memory (a model or
    batch too large for the machine); None for any other error."""
    message = _op_error_line(error)
    if message is not None and "OOM when allocating" in message:
        return message.split(" on /job:")[0]
    return None


def _op_error_line(error):
    """The first line of a `tf.errors.OpError`'s message without TensorFlow's wrapping
    ("{{function_node ...}} <what>; <why> [Op:SaveV2]" -> "<what>; <why>"); None for other
    errors."""
    message = getattr(error, "message", None)
    if not isinstance(message, str) or not message.strip():
        return None
    return re.sub(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:[^\]]*\]$", "",
                  message.strip().splitlines()[0])


def exit_when_out_of_resources(main, program):
    """`main` that exits (status 1) with one line, instead of a stack dump, when a write finds
    the disk full (naming the file) or an allocation does not fit in memory, and (status 130)
    when Ctrl-C stops it; writes are atomic (a temporary file and a rename, removed on
    failure), so files complete before are unchanged."""

    @functools.wraps(main)
    def guarded(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except KeyboardInterrupt:
            print(f"\n{program}: interrupted (Ctrl-C). Files complete before it are unchanged"
                  f"{INTERRUPT_ADVICE.get(program, '')}.", file=sys.stderr, flush=True)
            sys.exit(INTERRUPTED_STATUS)
        except Exception as error:  # re-raised unless it is a full disk or memory
            detail = disk_full_detail(error)
            if detail is not None:
                sys.exit(f"FATAL {program}: out of disk space ({detail}). Files complete before "
                         f"it are unchanged; free space and run the same command again"
                         f"{DISK_FULL_ADVICE.get(program, '')}.")
            detail = out_of_memory_detail(error)
            if detail is None:
                raise
            sys.exit(f"FATAL {program}: out of memory ({detail}). Files complete before it are "
                     f"unchanged; give a smaller model or batch (e.g. --hidden_dim, "
                     f"--batch_size) or run on a machine with more memory.")

    return guarded


def run(main, *, program, doc, module_name, flag_values=flags.FLAGS, notes=None, argv=None):
    """`absl.app.run(main)` with `parse` as the flags parser, exiting with one line when the
    disk is full or memory runs out (`exit_when_out_of_resources`)."""

    def flags_parser(args):
        return parse(args, flag_values, program=program, doc=doc, module_name=module_name,
                     notes=notes)

    app.run(exit_when_out_of_resources(main, program), argv=argv, flags_parser=flags_parser)
