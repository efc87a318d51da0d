"""Replicas and batch rows: a batch the replicas cannot share is a run refused at its start."""

import types
from pathlib import Path

import tensorflow as tf

from psmm_tf.testing import run_in_fresh_process, tiny_config
from psmm_tf.training import distribution, run_setup


class RowsPerReplicaTest(tf.test.TestCase):
    def test_an_uneven_batch_is_refused_naming_batch_size_before_a_run_writes(self):
        two = types.SimpleNamespace(num_replicas_in_sync=2)  # a strategy's replica count
        self.assertEqual(distribution.rows_per_replica(4, two), 2)
        message = (r"batch_size=3 \(--batch_size\) must be a multiple of the number of "
                   r"replicas \(2\)")
        with self.assertRaisesRegex(ValueError, message):
            distribution.rows_per_replica(3, two)
        # A run (a multi-worker one too, whose replicas are known only once it runs) is
        # refused at its start, before its workdir exists.
        workdir = Path(self.get_temp_dir()) / "run"
        config = tiny_config().replace(train={"batch_size": 3})
        with self.assertRaisesRegex(run_setup.RunRefusedError, message):
            run_setup.prepare_workdir(config, workdir, two)
        self.assertFalse(workdir.exists())

    def test_mirrored_replicas_are_those_make_strategy_makes(self):
        # Read before the strategy exists (psmm-train's flag check), in a fresh process: the
        # logical CPU devices of make_strategy cannot be set once TensorFlow has started.
        out = run_in_fresh_process("""
            from psmm_tf.training import distribution
            replicas, devices = distribution.mirrored_replicas(3)
            strategy = distribution.make_strategy("mirrored", 3)
            print("REPLICAS", replicas, strategy.num_replicas_in_sync, devices)
        """)
        line = next(line for line in out.splitlines() if line.startswith("REPLICAS"))
        _, predicted, made, devices = line.split(" ", 3)
        self.assertEqual(predicted, made, devices)
        if not tf.config.list_physical_devices("GPU"):
            self.assertEqual((predicted, devices), ("3", "--logical_cpus=3 CPU devices"))
            self.assertEqual(distribution.mirrored_replicas(0), (1, "the one CPU"))


if __name__ == "__main__":
    tf.test.main()
