r"""The export's tracing, side by side in one process: the model's graph traced once for the four
scoring signatures (the export as it is) against traced in each of them, and against that with
every endpoint traced a second time by `tf.saved_model.save`.

Ways (all save the same signatures; only how often the model's graph is built differs):
- `shared`: the export (`ServingModule`): the four scoring signatures call one function of the
  model's pass, traced once, and the module's attribute functions call the traced signatures.
- `per_signature`: the model's pass traced inside each scoring signature (the shared function
  replaced by its Python method).
- `twice`: `per_signature` with the traced signatures forgotten right after `signatures()`, so
  save traces every endpoint's method again.

Each round saves the tiny export model (`psmm_tf.export.testing.tiny_model`) each way, in turn
(A B C A B C ...), into fresh temporary folders, after one unmeasured warm-up export, then loads
each folder (`tf.saved_model.load`). Prints the seconds of each way per round, the medians, the
ratios to `shared`, and each folder's size.

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

WAYS = ("shared", "per_signature", "twice")


def save(model, vocabulary_file, folder, way):
    """Seconds to build the serving module and save it with its signatures, the way `way`."""
    started = time.perf_counter()
    module = ServingModule(model, vocabulary_file)
    if way != "shared":
        module._held.scores = module._model_scores  # noqa: SLF001 (the ways measured against)
    signatures = module.signatures()
    if way == "twice":
        module._held.signatures.clear()  # noqa: SLF001
    tf.saved_model.save(module, str(folder), signatures=signatures)
    return time.perf_counter() - started


def load(folder):
    """Seconds to load the SavedModel in `folder` with its signatures."""
    started = time.perf_counter()
    tf.saved_model.load(str(folder)).signatures  # noqa: B018 (loading is what is measured)
    return time.perf_counter() - started


def folder_kilobytes(folder):
    return sum(path.stat().st_size for path in Path(folder).rglob("*") if path.is_file()) / 1024


def main(argv):
    del argv
    model, _ = export_testing.tiny_model()
    seconds = {(way, step): [] for way in WAYS for step in ("save", "load")}
    sizes = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        vocabulary_file = export_testing.write_vocabulary(str(tmp / "vocab.txt"))
        save(model, vocabulary_file, tmp / "warm_up", "shared")
        for round_ in range(FLAGS.rounds):
            for way in WAYS:
                folder = tmp / f"{way}{round_}"
                seconds[way, "save"].append(save(model, vocabulary_file, folder, way))
                seconds[way, "load"].append(load(folder))
                sizes[way] = folder_kilobytes(folder)
                print(f"round {round_ + 1} {way}: save {seconds[way, 'save'][-1]:.1f} s, "
                      f"load {seconds[way, 'load'][-1]:.1f} s", flush=True)
    medians = {key: statistics.median(values) for key, values in seconds.items()}
    for way in WAYS:
        ratios = {step: medians[way, step] / medians["shared", step] for step in ("save", "load")}
        print(f"{way}: save median {medians[way, 'save']:.1f} s (x {ratios['save']:.2f} of "
              f"shared), load median {medians[way, 'load']:.1f} s (x {ratios['load']:.2f}), "
              f"{sizes[way]:.0f} KB, over {FLAGS.rounds} round(s)")


if __name__ == "__main__":
    app.run(main)
