"""tf.distribute: 2 mirrored CPU devices and 2 loopback workers match one device.

Dropout and zoneout are off: each replica draws its masks for its own rows, so with them on
the runs differ by their random masks, not by their arithmetic.
"""

import json
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import tensorflow as tf

from psmm_tf.testing import run_script, start_script
from psmm_tf.training import reporting

FLAGS = ["--preset=tiny", "--synthetic_train_tokens=3000", "--steps_per_epoch=6", "--epochs=1",
         "--max_eval_tokens=200", "--dropout=0", "--zoneout=0", "--verbose=0"]


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


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
        self.assertLen(self.expected, 6)
        self.assertEqual(sorted(actual), sorted(self.expected))
        for key, loss in self.expected.items():
            self.assertAllClose(actual[key], loss, rtol=1e-5, msg=str(key))
        results = json.loads((Path(workdir) / "results.json").read_text())
        self.assertAllClose(results["test_perplexity"], self.expected_results["test_perplexity"],
                            rtol=1e-4)

    def test_mirrored_two_cpu_devices(self):
        workdir = self.base / "mirrored"
        done = run_script("trainers/train.py", FLAGS + [
            f"--workdir={workdir}", "--strategy=mirrored", "--logical_cpus=2"])
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertIn("psmm: 2 replica(s)", done.stderr)
        self.assert_same_run(workdir)

    def test_multi_worker_two_processes(self):
        workdir = self.base / "multi_worker"
        ports = _free_ports(2)
        cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
        workers = []
        for index in range(2):
            tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker",
                                                                 "index": index}})
            workers.append(start_script(
                "trainers/train.py", FLAGS + [f"--workdir={workdir}", "--strategy=multi_worker"],
                env={"TF_CONFIG": tf_config}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True))
        outputs = [w.communicate(timeout=240) for w in workers]
        for worker, (_, err) in zip(workers, outputs, strict=True):
            self.assertEqual(worker.returncode, 0, err[-3000:])
        self.assertIn("psmm: 2 replica(s)", outputs[0][1])
        self.assert_same_run(workdir)
        self.assertFalse((workdir / ".worker_1").exists())  # the other worker's scratch files


if __name__ == "__main__":
    tf.test.main()
