"""tf.distribute: 2 mirrored CPU devices and 2 loopback workers match one device, through
mid-epoch checkpoints and a SIGKILL resume.

Dropout and zoneout are off: each replica draws its masks for its own rows, so with them on
the runs differ by their random masks, not by their arithmetic. A checkpoint is written every
`CHECKPOINT_EVERY` steps, so every run gathers its replicas' state and memory mid-epoch.
"""

import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import tensorflow as tf

from psmm_tf.testing import run_script, start_script
from psmm_tf.training import reporting

STEPS, CHECKPOINT_EVERY = 20, 5
FLAGS = ["--preset=tiny", "--synthetic_train_tokens=8000", f"--steps_per_epoch={STEPS}",
         "--epochs=1", f"--checkpoint_every_steps={CHECKPOINT_EVERY}", "--max_eval_tokens=200",
         "--dropout=0", "--zoneout=0", "--verbose=0"]
# The killed runs are killed once this mid-epoch checkpoint exists.
KILL_AFTER = f"ckpt-{2 * CHECKPOINT_EVERY}.index"


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _worker_env(ports, index):
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker",
                                                                  "index": index}})}


class DistributedTrainingTest(tf.test.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.base = Path(tempfile.mkdtemp(prefix="psmm_distributed_"))
        single = run_script("trainers/train.py", FLAGS + [f"--workdir={cls.base / 'single'}"])
        assert single.returncode == 0, single.stderr[-3000:]
        cls.expected = reporting.read_step_losses(cls.base / "single")
        cls.expected_results = json.loads((cls.base / "single" / "results.json").read_text())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.base, ignore_errors=True)
        super().tearDownClass()

    def assert_same_run(self, workdir):
        actual = reporting.read_step_losses(workdir)
        self.assertLen(self.expected, STEPS)
        self.assertEqual(sorted(actual), sorted(self.expected))
        for key, loss in self.expected.items():
            self.assertAllClose(actual[key], loss, rtol=1e-5, msg=str(key))
        results = json.loads((Path(workdir) / "results.json").read_text())
        self.assertAllClose(results["test_perplexity"], self.expected_results["test_perplexity"],
                            rtol=1e-4)

    def kill_at_checkpoint(self, workdir, processes):
        """SIGKILLs `processes` once `KILL_AFTER` appears in the chief's checkpoints."""
        deadline = time.time() + 240
        while not (workdir / "checkpoints" / KILL_AFTER).exists():
            for process in processes:
                self.assertIsNone(process.poll(), "the run ended before it could be killed")
            self.assertLess(time.time(), deadline, "no mid-epoch checkpoint appeared")
            time.sleep(0.01)
        for process in processes:
            process.send_signal(signal.SIGKILL)
        for process in processes:
            self.assertEqual(process.wait(), -signal.SIGKILL)
        self.assertFalse((workdir / "history.json").exists(), "killed after the epoch")

    # Each run below trains on two replicas from its start to its kill and from its resume to
    # its end, every step compared with the one-device run: a run that is not killed would
    # take the same code path.
    def test_mirrored_killed_and_resumed(self):
        workdir = self.base / "mirrored_killed"
        flags = FLAGS + [f"--workdir={workdir}", "--strategy=mirrored", "--logical_cpus=2"]
        process = start_script("trainers/train.py", flags, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        self.kill_at_checkpoint(workdir, [process])
        resumed = run_script("trainers/train.py", flags)
        self.assertEqual(resumed.returncode, 0, resumed.stderr[-3000:])
        self.assertIn("psmm: 2 replica(s)", resumed.stderr)
        self.assertRegex(resumed.stderr, r"Resumed .*ckpt-\d+ at epoch 0, step [1-9]\d*\.")
        self.assert_same_run(workdir)

    def run_workers(self, workdir, ports):
        """Runs the two workers of a loopback cluster to the end; returns worker 0's stderr."""
        workers = [start_script(
            "trainers/train.py", FLAGS + [f"--workdir={workdir}", "--strategy=multi_worker"],
            env=_worker_env(ports, index), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True) for index in range(2)]
        outputs = [w.communicate(timeout=240) for w in workers]
        for worker, (_, err) in zip(workers, outputs, strict=True):
            self.assertEqual(worker.returncode, 0, err[-3000:])
        return outputs[0][1]

    def test_multi_worker_killed_and_resumed(self):
        workdir = self.base / "multi_worker_killed"
        ports = _free_ports(2)
        workers = [start_script(
            "trainers/train.py", FLAGS + [f"--workdir={workdir}", "--strategy=multi_worker"],
            env=_worker_env(ports, index), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for index in range(2)]
        self.kill_at_checkpoint(workdir, workers)
        stderr = self.run_workers(workdir, _free_ports(2))
        self.assertIn("psmm: 2 replica(s)", stderr)
        self.assertRegex(stderr, r"Resumed .*ckpt-\d+ at epoch 0, step [1-9]\d*\.")
        self.assert_same_run(workdir)
        self.assertFalse((workdir / ".worker_1").exists())  # the other worker's scratch files


if __name__ == "__main__":
    tf.test.main()
