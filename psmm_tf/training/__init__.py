"""Training and evaluation: the training loop, schedule, checkpoints, exact evaluation, analysis.

`train_lib.run(config, workdir)` trains (or resumes) a run; `Evaluator` computes exact
perplexity; `analysis` and `visualisation` reproduce the paper's Figure 4 and Figures 5-12.
"""

from psmm_tf.training.evaluation import EvaluationResult, Evaluator
from psmm_tf.training.schedule import EpochDecision, PlateauSchedule
from psmm_tf.training.train_lib import NonFiniteLossError, run

__all__ = [
    "EpochDecision",
    "EvaluationResult",
    "Evaluator",
    "NonFiniteLossError",
    "PlateauSchedule",
    "run",
]
