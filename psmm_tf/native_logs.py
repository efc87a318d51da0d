"""Quiet command lines: TensorFlow's C++ log lines kept off a CLI user's terminal.

TensorFlow logs through Abseil's C++ logging, which, before `absl::InitializeLog()` (never
called in a Python process), writes every message to stderr whatever TF_CPP_MIN_LOG_LEVEL
says: a new user of psmm-train sees CUDA probing and oneDNN notices ("E0000 ... failed call
to cuInit", "I0000 ... oneDNN custom operations are on") before the program's own output.

`hide_native_log_lines()` puts a filter on file descriptor 2: lines in that pre-initialisation
format (`[IWE]0000 00:00:<seconds> <thread> <file>:<line>] `), Abseil's one warning about it
and the second line of TensorFlow's CPU-feature notice are dropped; everything else (the
program's messages, Python tracebacks, absl's Python log lines, C++ fatal errors) passes
unchanged and in order. The psmm_tf package installs it when it is imported by one of the
command-line programs and the user has not set TF_CPP_MIN_LOG_LEVEL (which then decides, as
TensorFlow documents it). A Python program that imports psmm_tf is left alone.
"""

import atexit
import os
import re
import sys
import threading

PROGRAMS = ("psmm-train", "psmm-evaluate", "psmm-export", "psmm-score")
# Abseil's C++ log prefix before InitializeLog (date and time not yet known), INFO to ERROR.
NATIVE_LINE = re.compile(rb"^[IWE]0000 00:00:\d+\.\d+ +\d+ [^ :]+:\d+\] ")
# Abseil's warning about it, and the second line of TensorFlow's CPU-feature notice.
OTHER_LINES = (b"WARNING: All log messages before absl::InitializeLog() is called are written",
               b"To enable the following instructions: ")


def is_native_log_line(line):
    """Whether `line` (bytes) is a C++ INFO/WARNING/ERROR line the filter drops."""
    return bool(NATIVE_LINE.match(line)) or line.startswith(OTHER_LINES)


def wanted_for(program_path, environ):
    """Whether a process started as `program_path` (sys.argv[0]) gets the filter."""
    return (os.path.basename(program_path) in PROGRAMS
            and "TF_CPP_MIN_LOG_LEVEL" not in environ)


def hide_native_log_lines():
    """Routes fd 2 through a thread that drops `is_native_log_line` lines; restored at exit.

    Call it before TensorFlow is imported (its first lines come at import).
    """
    terminal = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward():
        pending = b""
        while chunk := os.read(read_end, 65536):
            *lines, pending = (pending + chunk).split(b"\n")
            kept = b"".join(line + b"\n" for line in lines if not is_native_log_line(line))
            if kept:
                os.write(terminal, kept)
        if pending and not is_native_log_line(pending):
            os.write(terminal, pending)
        os.close(read_end)

    thread = threading.Thread(target=forward, name="native-log-filter", daemon=True)
    thread.start()

    def restore():
        sys.stderr.flush()
        os.dup2(terminal, 2)  # closes the pipe's last write end: the thread reads to the end
        thread.join(timeout=5)

    atexit.register(restore)
