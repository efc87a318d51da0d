"""The paper's schedule on scripted validation curves (section 5.2)."""

import math

import tensorflow as tf

from psmm_tf.training.schedule import PlateauSchedule


class PlateauScheduleTest(tf.test.TestCase):
    def run_curve(self, schedule, curve):
        return [schedule.update(ppl) for ppl in curve]

    def test_halves_when_worse_than_previous_and_stops_after_patience(self):
        schedule = PlateauSchedule(1.0, lr_decay=0.5, patience=3, max_epochs=64)
        # best 90 at epoch 2; 95 worse than 90 (halve), 92 better than 95 (keep), 93 worse than
        # 92 (halve): three epochs without a new best -> stop.
        decisions = self.run_curve(schedule, [100.0, 90.0, 95.0, 92.0, 93.0])
        self.assertEqual([d.improved for d in decisions], [True, True, False, False, False])
        self.assertEqual([d.decayed for d in decisions], [False, False, True, False, True])
        self.assertEqual([d.learning_rate for d in decisions], [1.0, 1.0, 0.5, 0.5, 0.25])
        self.assertEqual([d.stop for d in decisions], [False, False, False, False, True])
        self.assertTrue(schedule.should_stop)
        self.assertEqual(float(schedule.best_perplexity.numpy()), 90.0)

    def test_decay_unless_best_halves_after_every_epoch_that_is_not_a_new_best(self):
        schedule = PlateauSchedule(1.0, lr_decay=0.5, patience=9, max_epochs=9,
                                   decay_unless_best=True)
        # 92 is better than 95 but not than 90: halved too (the paper's rule keeps it), and an
        # epoch equal to the best is no new best.
        decisions = self.run_curve(schedule, [100.0, 90.0, 95.0, 92.0, 90.0, 80.0])
        self.assertEqual([d.decayed for d in decisions], [False, False, True, True, True, False])
        self.assertEqual(decisions[-1].learning_rate, 0.125)

    def test_a_new_best_resets_patience(self):
        schedule = PlateauSchedule(2.0, lr_decay=0.5, patience=2, max_epochs=64)
        decisions = self.run_curve(schedule, [50.0, 60.0, 40.0, 45.0, 44.0])
        self.assertEqual([d.stop for d in decisions], [False, False, False, False, True])
        self.assertEqual(int(schedule.bad_epochs.numpy()), 2)
        self.assertEqual(decisions[-1].learning_rate, 0.5)  # halved after 60 and after 45

    def test_stops_at_max_epochs_while_improving(self):
        schedule = PlateauSchedule(1.0, patience=3, max_epochs=4)
        decisions = self.run_curve(schedule, [10.0, 9.0, 8.0, 7.0])
        self.assertEqual([d.stop for d in decisions], [False, False, False, True])
        self.assertEqual(decisions[-1].learning_rate, 1.0)

    def test_zaremba_decay_by_epoch_whatever_validation_does(self):
        # decay_from_epoch=3: epochs 1-3 at 1, then x 0.5 after epochs 3, 4, 5 and 6; a worse
        # epoch (epoch 2) does not decay, a better one past the start (epoch 4) does; patience
        # still stops the run (epochs 4-6 without a new best after 70).
        schedule = PlateauSchedule(1.0, lr_decay=0.5, patience=3, max_epochs=64,
                                   decay_from_epoch=3)
        decisions = self.run_curve(schedule, [100.0, 110.0, 80.0, 70.0, 75.0, 71.0, 72.0])
        self.assertEqual([d.decayed for d in decisions],
                         [False, False, True, True, True, True, True])
        self.assertEqual([d.learning_rate for d in decisions],
                         [1.0, 1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125])
        self.assertEqual([d.improved for d in decisions],
                         [True, False, True, True, False, False, False])
        self.assertEqual([d.stop for d in decisions], [False] * 6 + [True])
        # Resumed from a checkpoint mid-way, it decays by the epochs it has done.
        path = tf.train.Checkpoint(schedule=schedule).save(self.get_temp_dir() + "/zaremba")
        restored = PlateauSchedule(1.0, lr_decay=0.5, patience=9, max_epochs=64,
                                   decay_from_epoch=9)
        tf.train.Checkpoint(schedule=restored).restore(path).assert_consumed()
        self.assertFalse(restored.update(60.0).decayed)  # epoch 8 < 9
        self.assertTrue(restored.update(65.0).decayed)  # epoch 9

    def test_non_finite_perplexity_is_worse(self):
        schedule = PlateauSchedule(1.0, patience=3, max_epochs=64)
        schedule.update(10.0)
        decision = schedule.update(math.nan)
        self.assertFalse(decision.improved)
        self.assertTrue(decision.decayed)
        self.assertEqual(decision.learning_rate, 0.5)

    def test_state_survives_a_checkpoint(self):
        schedule = PlateauSchedule(1.0, patience=3, max_epochs=64)
        self.run_curve(schedule, [100.0, 120.0])
        path = tf.train.Checkpoint(schedule=schedule).save(self.get_temp_dir() + "/ckpt")
        restored = PlateauSchedule(1.0, patience=3, max_epochs=64)
        tf.train.Checkpoint(schedule=restored).restore(path).assert_consumed()
        self.assertEqual([v.numpy() for v in restored.variables],
                         [v.numpy() for v in schedule.variables])
        self.assertEqual(restored.update(130.0).learning_rate, 0.25)

    def test_rejects_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "learning_rate must be > 0"):
            PlateauSchedule(0.0)
        with self.assertRaisesRegex(ValueError, r"lr_decay must be in \(0, 1\]"):
            PlateauSchedule(1.0, lr_decay=1.5)
        for epoch in (0, -1, 2.0, True):
            with self.assertRaisesRegex(ValueError, "decay_from_epoch must be an integer >= 1"):
                PlateauSchedule(1.0, decay_from_epoch=epoch)


if __name__ == "__main__":
    tf.test.main()
