"""Training: the loop, steps, schedule, checkpoints, distribution and the run's reports.

`train_lib.run(config, workdir)` trains (or resumes) a run; exact evaluation, the neural cache
and the analysis live in `psmm_tf.evaluation`.
"""

from psmm_tf.training.schedule import EpochDecision, PlateauSchedule
from psmm_tf.training.train_lib import NonFiniteLossError, run

__all__ = [
    "EpochDecision",
    "NonFiniteLossError",
    "PlateauSchedule",
    "run",
]
