r"""The export's tracing: each endpoint traced once (the serving module's attribute functions
call the traced signatures) against traced twice (the attribute functions traced again from
their methods when `tf.saved_model.save` lists them), side by side in one process.

Each round saves the tiny export model (`psmm_tf.export.testing.tiny_model`) both ways, in turn
(A B A B ...), into fresh temporary folders, after one unmeasured warm-up export (AutoGraph's
conversions are made once a process). "Traced twice" is the module with its traced signatures
forgotten right after `signatures()`, so save traces every endpoint's method again. Prints the
seconds of each way per round, their medians and the ratio twice / once.

Usage:
  python benchmarks/export_trace.py --rounds=3
"""

import statistics
import tempfile
import time
from pathlib import Path

import tensorflow as tf
from absl import app, flags

from psmm_tf.export import testing as export_testing
from psmm_tf.export.serving_module import ServingModule

FLAGS = flags.FLAGS
flags.DEFINE_integer("rounds", 3, "Exports of each way.", lower_bound=1)


def save(model, vocabulary_file, folder, trace_twice):
    """Seconds to build the serving module and save it with its signatures."""
    started = time.perf_counter()
    module = ServingModule(model, vocabulary_file)
    signatures = module.signatures()
    if trace_twice:
        module._held.signatures.clear()  # noqa: SLF001 (the way measured against)
    tf.saved_model.save(module, str(folder), signatures=signatures)
    return time.perf_counter() - started


def main(argv):
    del argv
    model, _ = export_testing.tiny_model()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        vocabulary_file = export_testing.write_vocabulary(str(tmp / "vocab.txt"))
        save(model, vocabulary_file, tmp / "warm_up", trace_twice=False)
        seconds = {"once": [], "twice": []}
        for round_ in range(FLAGS.rounds):
            for way in seconds:
                seconds[way].append(save(model, vocabulary_file, tmp / f"{way}{round_}",
                                         trace_twice=way == "twice"))
                print(f"round {round_ + 1} traced {way}: {seconds[way][-1]:.1f} s", flush=True)
    medians = {way: statistics.median(values) for way, values in seconds.items()}
    for way, median in medians.items():
        print(f"traced {way}: median {median:.1f} s over {FLAGS.rounds} round(s)")
    print(f"twice / once: {medians['twice'] / medians['once']:.2f}")


if __name__ == "__main__":
    app.run(main)
