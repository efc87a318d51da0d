r"""psmm-score: per-token log-probabilities, gate and perplexity of a text with an export.

Usage examples:
  # An export folder (or a base folder of versions: the latest) loaded in this process.
  psmm-score --model=/models/psmm --input=ptb.test.txt --format=json

  # A model served by TF Serving, over REST or gRPC; the text from stdin.
  echo "the cat sat" | psmm-score --rest=http://localhost:8501 --model_name=psmm
  psmm-score --grpc=localhost:8500 --model_name=psmm --model_version=2 --input=text.txt

The model runs in this process (`--model`, an export folder or a base of versions) or behind
TF Serving (`--rest http://host:8501` or `--grpc host:8500`, with `--model_name`). Input is a
text file or stdin, read as a corpus file: every line's words and an `<eos>`.

By default the file is one document: lines are sent in chunks through `score_text_stream` with
the carried state, so the perplexity is the exact one of the whole text, as evaluation gives.
The state is whatever `initial_state` returns (with a neural cache export, the cache too).
`--independent` scores every line on its own (batched through `serving_default`).

Output (`--format text`): for every line, one `token<TAB>log_prob<TAB>gate` row per token and
a `# line N: perplexity P (T tokens)` row; then `# total: ...`. `--format json`: one JSON object
per line (`line`, `tokens`, `log_probs`, `gate`, `num_tokens`, `log_likelihood`,
`perplexity`), then a `{"total": {...}}` object.

Exactly one of --model, --rest and --grpc is given. Flag errors and unreadable inputs exit
with status 2, a failed request or write of the scores with 1, Ctrl-C with 130; a closed
output pipe (`| head`) ends it quietly with 141, as SIGPIPE would.
"""

import sys

from absl import flags

from psmm_tf import cli
from psmm_tf.export import score_lib

# Its own flag registry, as psmm-export's: --model and --model_name are psmm-train's and
# psmm-export's names too, and the test process imports all of them.
SCORE_FLAGS = flags.FlagValues()
PROGRAM = "psmm-score"
flags.DEFINE_string("model", None, "Export folder, or a base folder of versions (the latest "
                    "is used). Exactly one of --model, --rest and --grpc.",
                    flag_values=SCORE_FLAGS)
flags.DEFINE_string("rest", None, "TF Serving REST URL, e.g. http://localhost:8501.",
                    flag_values=SCORE_FLAGS)
flags.DEFINE_string("grpc", None, "TF Serving gRPC address, e.g. localhost:8500.",
                    flag_values=SCORE_FLAGS)
flags.mark_flags_as_mutual_exclusive(["model", "rest", "grpc"], required=True,
                                     flag_values=SCORE_FLAGS)
flags.DEFINE_string("model_name", "psmm", "Served model name (with --rest or --grpc).",
                    flag_values=SCORE_FLAGS)
flags.DEFINE_integer("model_version", None, "Version to score with (default: the latest); "
                     "with --model, a version folder of that base.", flag_values=SCORE_FLAGS)
flags.DEFINE_string("input", "-", "Text file (UTF-8, gzip-compressed if the name ends in .gz); "
                    "'-' for stdin.", flag_values=SCORE_FLAGS)
flags.DEFINE_enum("format", "text", ["text", "json"], "text: one token<TAB>log_prob<TAB>gate "
                  "row per token and a '# line N: perplexity' row per line; json: one object "
                  "per line, then a total.", flag_values=SCORE_FLAGS)
flags.DEFINE_bool("independent", False, "Score each line on its own (batched) instead of the "
                  "file as one document with the state carried.", flag_values=SCORE_FLAGS)
flags.DEFINE_integer("lines_per_request", 64, "Lines per request: a chunk of the document (with "
                     "the carried state), or a batch of lines with --independent.",
                     flag_values=SCORE_FLAGS)
flags.DEFINE_float("timeout", 30.0, "Seconds per request (with --rest or --grpc).",
                   flag_values=SCORE_FLAGS)
cli.define_version_flag(SCORE_FLAGS)
for _where in ("model", "rest", "grpc"):
    flags.register_validator(_where, lambda v: v is None or v.strip() != "",
                             message="is empty: expected an export folder (--model), a URL "
                             "(--rest) or host:port (--grpc).", flag_values=SCORE_FLAGS)
# A day: longer is not a request timeout (and past the clock's range, the socket's deadline
# overflows).
MAX_TIMEOUT_SECONDS = 86400.0
flags.register_validator("timeout", lambda v: 0 < v <= MAX_TIMEOUT_SECONDS,
                         message="must be a number of seconds in (0, 86400].",
                         flag_values=SCORE_FLAGS)
flags.register_multi_flags_validator(
    ["model", "model_name", "timeout"],
    lambda v: v["model"] is None or not (SCORE_FLAGS["model_name"].present
                                         or SCORE_FLAGS["timeout"].present),
    message="--model_name and --timeout are for a server (--rest, --grpc); --model loads the "
    "export in this process (its version: --model_version).", flag_values=SCORE_FLAGS)
flags.register_validator("model_version", lambda v: v is None or v >= 1,
                         message="must be an integer >= 1 (a version folder's number).",
                         flag_values=SCORE_FLAGS)


def main(argv=None, out=None):
    """Console-script entry point (`psmm-score`); returns the exit status.

    Args:
        argv: the arguments after the program name (default: `sys.argv[1:]`).
        out: where the scores go (default: stdout).

    Ctrl-C (KeyboardInterrupt) returns `cli.INTERRUPTED_STATUS` (130) after one line on stderr.

    Raises:
        SystemExit: --help, --version (status 0) or a flag error (status 2, the message on
            stderr), as `psmm_tf.cli.parse` handles them.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    remaining = cli.parse([PROGRAM, *argv], SCORE_FLAGS, program=PROGRAM, doc=__doc__,
                          module_name=__name__, error_status=2)
    if len(remaining) > 1:
        print(f"psmm-score: unexpected arguments: {' '.join(remaining[1:])}", file=sys.stderr)
        return 2
    try:
        return score_lib.run(out=out,
                             **{name: SCORE_FLAGS[name].value for name in score_lib.OPTIONS})
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status, no traceback
        print(f"\n{PROGRAM}: interrupted (Ctrl-C); the lines written before it are complete.",
              file=sys.stderr, flush=True)
        return cli.INTERRUPTED_STATUS


if __name__ == "__main__":
    sys.exit(main())
