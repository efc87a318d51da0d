r"""A new process's first training steps: the package's graphs traced as written
(`psmm_tf.compiled.graph_function`, `tf.function` without AutoGraph) against traced through
AutoGraph (`tf.function`'s default), side by side in fresh processes.

Each round starts two child processes in turn (as written, then AutoGraph; A B A B ...); each
runs `train_lib.run` of the preset on a synthetic corpus for --steps training steps and its
final evaluation (the tracing every psmm-train run pays before its first step, then its
evaluation) and prints the run's seconds; in the AutoGraph child `graph_function` is
`tf.function` with its defaults. The step losses of the two ways are compared (they are equal:
the graphs compute the same ops). Prints each child's seconds, the medians and the ratio
AutoGraph / as written.

Usage:
  python benchmarks/first_trace.py --rounds=3
  python benchmarks/first_trace.py --preset=medium --steps=2 --rounds=2
"""

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "tiny", "Model preset (trained on a synthetic corpus).")
flags.DEFINE_integer("steps", 3, "Training steps of each run.", lower_bound=1)
flags.DEFINE_integer("rounds", 3, "Child processes of each way.", lower_bound=1)
flags.DEFINE_enum("child", None, ["as_written", "autograph"], "Internal: run one child.")
flags.DEFINE_string("workdir", None, "Internal: the child's run folder.")

WAYS = ("as_written", "autograph")


def run_child(way, workdir):
    """In this process: one run of the preset, traced `way`; prints its seconds as JSON."""
    import time

    if way == "autograph":
        import tensorflow as tf

        from psmm_tf import compiled

        def with_autograph(function=None, **options):
            if function is None:
                return lambda decorated: tf.function(decorated, **options)
            return tf.function(function, **options)

        # Before the training modules import it by name.
        compiled.graph_function = with_autograph
    from psmm_tf import configs
    from psmm_tf.training import train_lib

    config = configs.get_preset(FLAGS.preset).replace(
        train={"steps_per_epoch": FLAGS.steps, "max_epochs": 1, "max_eval_tokens": 200,
               "checkpoint_every_steps": FLAGS.steps},
        data={"synthetic_train_tokens": 20000})
    started = time.perf_counter()
    results = train_lib.run(config, workdir, verbose=0)
    print(json.dumps({"seconds": time.perf_counter() - started,
                      "train_seconds": results["train_seconds"]}))


def step_losses(workdir):
    lines = (Path(workdir) / "steps.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines]


def main(argv):
    del argv
    if FLAGS.child:
        run_child(FLAGS.child, FLAGS.workdir)
        return
    seconds = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as tmp:
        losses = {}
        for round_ in range(FLAGS.rounds):
            for way in WAYS:
                workdir = f"{tmp}/{way}{round_}"
                output = subprocess.run(
                    [sys.executable, __file__, f"--child={way}", f"--workdir={workdir}",
                     f"--preset={FLAGS.preset}", f"--steps={FLAGS.steps}"],
                    capture_output=True, text=True, check=True).stdout
                measured = json.loads(output.strip().splitlines()[-1])
                seconds[way].append(measured["seconds"])
                losses[way] = step_losses(workdir)
                print(f"round {round_ + 1} {way}: run {measured['seconds']:.1f} s (training "
                      f"steps {measured['train_seconds']:.1f} s)", flush=True)
        print(f"step losses equal: {losses['as_written'] == losses['autograph']}")
    medians = {way: statistics.median(values) for way, values in seconds.items()}
    for way, median in medians.items():
        print(f"{way}: median {median:.1f} s over {FLAGS.rounds} run(s)")
    print(f"autograph / as_written: {medians['autograph'] / medians['as_written']:.2f}")


if __name__ == "__main__":
    app.run(main)
