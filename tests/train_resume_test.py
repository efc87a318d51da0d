"""A run killed with SIGKILL mid-epoch and resumed gives the losses of an uninterrupted run."""

import signal
import subprocess
import time
from pathlib import Path

import tensorflow as tf

from psmm_tf.evaluation import pointer_diagnostics
from psmm_tf.testing import run_script, start_script, train_in_process
from psmm_tf.training import reporting

# Two epochs of 150 steps, dropout and zoneout on (their random state must be restored too),
# a checkpoint every 10 steps.
FLAGS = ["--preset=tiny", "--synthetic_train_tokens=20000", "--steps_per_epoch=150",
         "--epochs=2", "--checkpoint_every_steps=10", "--max_eval_tokens=300", "--verbose=0",
         "--seed=7"]
KILL_AFTER = "ckpt-40.index"  # epoch 1, step 40: mid-epoch


class KillAndResumeTest(tf.test.TestCase):
    def test_resumed_run_repeats_the_uninterrupted_losses(self):
        base = Path(self.get_temp_dir())
        reference, killed = base / "reference", base / "killed"
        # The uninterrupted reference in this process (no TensorFlow start); the killed run and
        # its resume are programs of their own.
        code, stderr = train_in_process(FLAGS + [f"--workdir={reference}"])
        self.assertEqual(code, 0, stderr[-3000:])

        process = start_script("trainers/train.py", FLAGS + [f"--workdir={killed}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 180
        while not (killed / "checkpoints" / KILL_AFTER).exists():
            self.assertIsNone(process.poll(), "the run ended before it could be killed")
            self.assertLess(time.time(), deadline, "no checkpoint appeared")
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        self.assertEqual(process.wait(), -signal.SIGKILL)
        self.assertFalse((killed / "history.json").exists(), "killed after the first epoch")
        logged_before = reporting.read_step_losses(killed)
        initial_pointer = (killed / "initial_pointer.npz").read_bytes()

        resumed = run_script("trainers/train.py", FLAGS + [f"--workdir={killed}"])
        self.assertEqual(resumed.returncode, 0, resumed.stderr[-3000:])
        self.assertRegex(resumed.stderr, r"Resumed .*ckpt-\d+ at epoch 0, step [1-9]\d*\.")

        expected = reporting.read_step_losses(reference)
        actual = reporting.read_step_losses(killed)
        self.assertLen(expected, 300)
        self.assertEqual(sorted(actual), sorted(expected))
        self.assertGreaterEqual(len(logged_before), 40)
        for key, loss in expected.items():
            self.assertAllClose(actual[key], loss, rtol=1e-6, atol=1e-6, msg=str(key))
        # The resume kept the pointer as initialised (psmm-evaluate's diagnostics read it): the
        # file as the killed start wrote it, the reference run's weights.
        self.assertEqual((killed / "initial_pointer.npz").read_bytes(), initial_pointer)
        initial = [pointer_diagnostics.load_initial_pointer_weights(run / "initial_pointer.npz")
                   for run in (reference, killed)]
        self.assertEqual(sorted(initial[1]), sorted(initial[0]))
        for name, value in initial[0].items():
            self.assertAllEqual(initial[1][name], value, msg=name)
        history = {r["epoch"]: r for r in reporting.read_history(reference)}
        for record in reporting.read_history(killed):
            for name in ("valid_perplexity", "train_perplexity", "learning_rate"):
                self.assertAllClose(record[name], history[record["epoch"]][name], rtol=1e-6)


if __name__ == "__main__":
    tf.test.main()
