"""psmm-score's library: a text's lines scored with an export, the rows it writes.

`export/score.py` parses the flags and calls `run` with them (the option names are the flags'
names); the clients (in-process, REST, gRPC) are `psmm_tf.export.clients`'.
"""

import contextlib
import gzip
import itertools
import json
import math
import os
import signal
import sys

import numpy as np

from psmm_tf.data import corpus
from psmm_tf.export.clients import (
    ExportLoadError,
    GrpcClient,
    LocalClient,
    RestClient,
    ServingError,
)

# psmm-score's options, as `run` takes them.
OPTIONS = ("model", "rest", "grpc", "model_name", "model_version", "input", "format",
           "independent", "lines_per_request", "timeout")

# The longest input line read (bytes, its "\n" excluded). A line is sent whole in one request,
# and no export takes a request near this size (20,000 tokens by default), so a longer "line"
# (a binary file, /dev/zero, a text without newlines) is refused instead of read into memory.
MAX_LINE_BYTES = 8 << 20


# The status of a run whose reader closed the pipe, as the shell reports a SIGPIPE death.
SIGPIPE_STATUS = 128 + signal.SIGPIPE


class InputError(ValueError):
    """The input cannot be read as text lines (the message names it and the line)."""


def line_results(outputs, row, first_line, line_lengths=None):
    """Splits one row of scoring outputs into per-line results.

    Args:
        outputs: a scoring signature's outputs. row: int. first_line: the row's first line's
            number (1-based).
        line_lengths: the number of tokens of each of the row's lines (its words and its
            `<eos>`); None: the row is one line. Counted, not found at `<eos>` tokens: a line
            may hold the word "<eos>" itself.

    Raises:
        ServingError: the server returned another number of tokens than the lines hold.
    """
    try:
        count = int(outputs["num_tokens"][row])
        tokens = list(outputs["tokens"][row][:count])
        log_probs = np.asarray(outputs["log_probs"][row][:count], float)
        gate = np.asarray(outputs["gate"][row][:count], float)
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise ServingError(f"The server's reply is not a psmm export's scores (row {row}: "
                           f"{type(err).__name__}: {str(err)[:200]}); is it serving a psmm "
                           "export?") from None
    line_lengths = [count] if line_lengths is None else list(line_lengths)
    if sum(line_lengths) != count or not len(tokens) == len(log_probs) == len(gate) == count:
        raise ServingError(f"The server returned {count} tokens for lines that hold "
                           f"{sum(line_lengths)} (their words and an <eos> each): is it serving "
                           f"a psmm export?")
    start = 0
    for line, length in enumerate(line_lengths, start=first_line):
        end = start + length
        total = float(np.sum(log_probs[start:end]))
        yield {"line": line, "tokens": tokens[start:end],
               "log_probs": log_probs[start:end].tolist(), "gate": gate[start:end].tolist(),
               "num_tokens": length, "log_likelihood": total,
               "perplexity": math.exp(-total / length)}
        start = end


def line_length(line):
    """Tokens of one line as the corpus readers read it: its words, then `<eos>`
    (`psmm_tf.data.corpus.line_tokens`)."""
    return len(line.split()) + 1


def _initial_state(client):
    """The state of one fresh stream: `initial_state` with one `stream_ids` entry."""
    try:
        return client.predict("initial_state", {"stream_ids": np.zeros([1], np.int32)})
    except ServingError as err:
        if "batch_size" not in str(err):
            raise
        # An export written before `initial_state` became batch-major takes a scalar batch_size.
        return client.predict("initial_state", {"batch_size": np.array(1, np.int32)})


def _chunks(lines, size):
    """Lists of up to `size` consecutive items of the iterable `lines`."""
    lines = iter(lines)
    while chunk := list(itertools.islice(lines, size)):
        yield chunk


def score_document(client, lines, lines_per_request=64):
    """Scores the iterable `lines` as one document, in chunks with the carried state; yields
    line results."""
    # The state tensors are the export's own: those of `initial_state` (STATE_NAMES, plus
    # CACHE_STATE_NAMES for an export with a neural cache).
    state = _initial_state(client)
    names = sorted(state)
    first = 0
    for chunk in _chunks(lines, lines_per_request):
        # The final "\n" ends the last line, so a chunk is never empty and blank lines count.
        texts = np.array(["\n".join(chunk) + "\n"], dtype=object)
        outputs = client.predict("score_text_stream", {"texts": texts, **state})
        missing = [name for name in names if name not in outputs]
        if missing:
            raise ServingError(f"The server's score_text_stream reply lacks the stream state "
                               f"{missing}: is it serving a psmm export?")
        state = {name: outputs[name] for name in names}
        yield from line_results(outputs, 0, first + 1, [line_length(line) for line in chunk])
        first += len(chunk)


def score_independent(client, lines, batch_size=32):
    """Scores every line of the iterable `lines` on its own, `batch_size` lines per request;
    yields line results."""
    first = 0
    for chunk in _chunks(lines, batch_size):
        texts = np.array([line + "\n" for line in chunk], object)
        outputs = client.predict("serving_default", {"texts": texts})
        for row in range(len(texts)):
            yield from line_results(outputs, row, first + row + 1)
        first += len(chunk)


def client_for(model=None, rest=None, grpc=None, model_name="psmm",
               model_version=None, timeout=30.0):
    """The client of --model (in this process), --rest or --grpc (TF Serving)."""
    if model:
        return LocalClient(model, model_version)
    if rest:
        return RestClient(rest, model_name, model_version, timeout)
    return GrpcClient(grpc, model_name, model_version, timeout)


def read_lines(path, max_line_bytes=MAX_LINE_BYTES):
    """Yields the lines of a text file (or stdin for '-'), one at a time, by the corpus
    readers' rules (`psmm_tf.data.corpus.decode_lines`): split on "\n" (a final "\n" ends the
    last line), "\r\n" line ends and a UTF-8 byte order mark at the start dropped, a file whose
    name ends in .gz decompressed. A line is read at most `max_line_bytes` at a time: memory is
    bounded by one line.

    Raises:
        OSError: the file cannot be opened or read.
        InputError: a line is not UTF-8, holds a NUL character (a binary file, UTF-16 text) or
            a byte order mark after the start, or is longer than `max_line_bytes` (each named
            by number); the text starts with a UTF-16 byte order mark or its lines end in "\r"
            alone; a .gz file is not gzip, cut or damaged.
    """
    with contextlib.ExitStack() as stack:
        stream = sys.stdin.buffer if path == "-" else stack.enter_context(open(path, "rb"))
        compressed = path.endswith(".gz")
        if compressed:
            stream = stack.enter_context(gzip.GzipFile(fileobj=stream))
        try:
            yield from corpus.decode_lines(_bounded_lines(stream, max_line_bytes), path,
                                           compressed)
        except InputError:
            raise
        except ValueError as err:  # the corpus rules', naming the input: named once
            raise InputError(str(err).removeprefix(f"{path}: ")) from None


def _bounded_lines(stream, max_line_bytes):
    """The raw lines of a binary `stream`, without their "\n", each read at most
    `max_line_bytes` at a time. Raises InputError for a longer one (named by number)."""
    for number in itertools.count(1):
        line = stream.readline(max_line_bytes + 2)
        if not line:
            return
        line = line[:-1] if line.endswith(b"\n") else line
        if len(line) > max_line_bytes:
            raise InputError(f"line {number} is longer than {max_line_bytes:,} bytes: expected "
                             f"text lines (each is sent whole in one request)")
        yield line


def write_result(result, fmt, out):
    """Writes one line's result (or the total) in `fmt`, "text" or "json"."""
    if fmt == "json":
        out.write(json.dumps(result) + "\n")
        return
    if "total" in result:
        total = result["total"]
        out.write(f"# total: perplexity {total['perplexity']:.4f} ({total['num_tokens']} tokens, "
                  f"log-likelihood {total['log_likelihood']:.4f})\n")
        return
    for token, log_prob, gate in zip(result["tokens"], result["log_probs"], result["gate"],
                                     strict=True):
        out.write(f"{token}\t{log_prob:.6f}\t{gate:.6f}\n")
    out.write(f"# line {result['line']}: perplexity {result['perplexity']:.4f} "
              f"({result['num_tokens']} tokens)\n")


def _refuse(message):
    print(f"psmm-score: {message}", file=sys.stderr)
    return 2


def run(*, model=None, rest=None, grpc=None, model_name="psmm", model_version=None, input="-",
        format="text", independent=False, lines_per_request=64, timeout=30.0, out=None):
    """Scores the lines of `input` and writes them to `out` (default stdout), as psmm-score.

    Args:
        model, rest, grpc: where the model is (exactly one; see `client_for`).
        model_name, model_version, timeout: as `client_for`'s.
        input: a text file, or "-" for stdin. format: "text" or "json" (`write_result`).
        independent: score every line on its own (`score_independent`) instead of the file
            as one document (`score_document`). lines_per_request: lines per request.

    Returns:
        The exit status: 0, 2 for an unreadable input or a bad option or address (the message
        on stderr), 1 for a failed request or a failed write of the scores (a full disk),
        `SIGPIPE_STATUS` (141), quietly, when the reader of the scores closed the pipe.
    """
    out = out or sys.stdout
    if lines_per_request < 1:
        return _refuse("--lines_per_request must be >= 1")
    lines = read_lines(input)
    try:
        first_line = next(lines, None)
    except (OSError, InputError) as err:
        return _refuse(f"cannot read {input}: {err}")
    if first_line is None:
        return _refuse(f"{input} holds no line to score")
    lines = itertools.chain([first_line], lines)
    try:
        client = client_for(model, rest, grpc, model_name, model_version, timeout)
    except (FileNotFoundError, ExportLoadError) as err:
        return _refuse(f"--model={model}: {err}")
    except ValueError as err:  # a --rest that is not a URL
        return _refuse(f"--rest={rest}: {err}")
    score = score_independent if independent else score_document
    total, count = 0.0, 0
    try:
        for result in score(client, lines, lines_per_request):
            total += result["log_likelihood"]
            count += result["num_tokens"]
            _write(result, format, out)
        _write({"total": {"num_tokens": count, "log_likelihood": total,
                          "perplexity": math.exp(-total / count)}}, format, out)
    except _OutputClosed:
        return _output_closed(out)
    except _OutputError as err:
        where = "stdout" if out is sys.stdout else getattr(out, "name", "the output")
        print(f"psmm-score: cannot write the scores to {where}: {err}", file=sys.stderr)
        return 1
    except (OSError, InputError) as err:  # a line after the first, read as it is scored
        return _refuse(f"cannot read {input}: {err}")
    except ServingError as err:
        hint = ""
        if "is too long: a request holds at most" in str(err):  # the export's max_tokens
            hint = (f"\npsmm-score: a request held {lines_per_request} lines"
                    + ("" if independent else " of the document") + "; give a smaller "
                    "--lines_per_request (or a server exported with a larger "
                    "--max_request_tokens).")
        print(f"psmm-score: {err}{hint}", file=sys.stderr)
        return 1
    return 0


class _OutputError(Exception):
    """Writing the scores failed (a full disk); the reason is the message."""


class _OutputClosed(Exception):
    """The reader of the scores went away (`psmm-score ... | head`)."""


def _write(result, fmt, out):
    """`write_result`, flushed, with a failed write told apart from a failed read."""
    try:
        write_result(result, fmt, out)
        out.flush()
    except BrokenPipeError:
        raise _OutputClosed() from None
    except OSError as err:
        raise _OutputError(err.strerror or str(err)) from None


def _output_closed(out):
    """The status of a run whose reader closed the pipe: quiet, as `head` expects of a
    program, with the shell's status for SIGPIPE; stdout is pointed at /dev/null so that
    Python's flush at exit does not report the closed pipe again."""
    if out is sys.stdout:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return SIGPIPE_STATUS
