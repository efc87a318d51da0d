r"""The native kernels' first-use build, three ways side by side in one run: the loader's
(`psmm_tf.native.build`: one compiler process over its one translation unit, which includes
every source, so TensorFlow's headers are parsed once), one compiler process per source run at
once and then the link, and one compiler command over all sources (compiled one after another).

Each round builds the library every way into fresh temporary folders, in turn (A B C A B C ...),
with the same flags, and checks in a fresh process (an op registers once a process) that each
library loads and holds every expected op. Prints the wall seconds of each way per round, their
medians and each way's ratio to the loader's.

Usage:
  python benchmarks/native_build.py --rounds=3
"""

import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from psmm_tf.native import build

FLAGS = flags.FLAGS
flags.DEFINE_integer("rounds", 3, "Builds of each way.", lower_bound=1)
flags.DEFINE_string("compiler", "g++", "The C++ compiler.")

# Run in a fresh process per library: an op registers once a process.
CHECK = """
import sys
import tensorflow as tf
from psmm_tf.native import build
library = tf.load_op_library(sys.argv[1])
missing = [op for op in build.EXPECTED_OPS if not hasattr(library, op)]
sys.exit(f"the library lacks {missing}" if missing else 0)
"""


def loader(tf, output):
    """The package's own build (`build._build`: the one unit's compile, the sidecar)."""
    build._build(tf, FLAGS.compiler, output, build.BUILD_TIMEOUT_S)


def per_source(tf, output):
    """One compiler process per source, all at once, each to an object file; then the link."""
    objects = [output.with_name(f"{source.stem}.o") for source in build.SOURCES]
    compiles = [subprocess.Popen([FLAGS.compiler, *build.CXX_FLAGS, "-c", str(source), "-o",
                                  str(obj), *tf.sysconfig.get_compile_flags()])
                for source, obj in zip(build.SOURCES, objects)]
    if any(process.wait() != 0 for process in compiles):
        sys.exit("per_source: a compile failed")
    subprocess.run([FLAGS.compiler, "-shared", *map(str, objects), "-o", str(output),
                    *tf.sysconfig.get_link_flags()], check=True)


def one_command(tf, output):
    """One compiler command over all sources (g++ compiles them one after another)."""
    subprocess.run([FLAGS.compiler, *build.CXX_FLAGS, "-shared", *map(str, build.SOURCES),
                    "-o", str(output), *tf.sysconfig.get_compile_flags(),
                    *tf.sysconfig.get_link_flags()], check=True)


def main(argv):
    del argv
    import tensorflow as tf

    ways = {"loader": loader, "per_source": per_source, "one_command": one_command}
    seconds = {name: [] for name in ways}
    for round_index in range(FLAGS.rounds):
        for name, way in ways.items():
            with tempfile.TemporaryDirectory() as folder:
                output = pathlib.Path(folder) / "kernels.so"
                start = time.monotonic()
                way(tf, output)
                seconds[name].append(time.monotonic() - start)
                check = subprocess.run([sys.executable, "-c", CHECK, str(output)],
                                       capture_output=True, text=True)
                if check.returncode != 0:
                    sys.exit(f"{name}: {check.stderr[-2000:]}")
            print(f"round {round_index + 1} {name}: {seconds[name][-1]:.1f} s", flush=True)
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    for name, value in medians.items():
        print(f"{name}: median {value:.1f} s over {FLAGS.rounds} round(s)")
    for name in ("per_source", "one_command"):
        print(f"{name} / loader: {medians[name] / medians['loader']:.2f}")


if __name__ == "__main__":
    app.run(main)
