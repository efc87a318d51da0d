"""The paper's learning-rate schedule and early stopping (Merity et al. 2016, section 5.2), and
Zaremba et al.'s (2014) decay by epoch.

After every epoch the validation perplexity decides: the learning rate is multiplied by
`lr_decay` (paper: halved) when it is worse than the previous epoch's, and training stops after
`patience` (paper: 3) epochs without a new best, or after `max_epochs` (paper: 64). With
`decay_from_epoch` the rate is instead multiplied by `lr_decay` after every epoch from that one on,
whatever validation does (Zaremba et al.'s medium LSTM: 1 / 1.2 from epoch 6, 39 epochs); the
stopping rule is the same.
"""

import dataclasses
import math

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class EpochDecision:
    """What the schedule decided after one epoch's validation perplexity.

    Attributes:
        improved: bool. The perplexity is a new best (save the model).
        decayed: bool. The learning rate was multiplied by `lr_decay` (for the next epoch).
        stop: bool. Training is over (patience exhausted or `max_epochs` reached).
        learning_rate: float. The learning rate for the next epoch.
    """

    improved: bool
    decayed: bool
    stop: bool
    learning_rate: float


class PlateauSchedule(tf.Module):
    """Learning rate, best and previous validation perplexity, and epochs without improvement.

    Its state lives in `tf.Variable`s so that a `tf.train.Checkpoint` saves and restores it with
    the model. A non-finite perplexity counts as worse than any other.

    Args:
        learning_rate: float > 0. The initial learning rate.
        lr_decay: float in (0, 1]. Factor applied when validation gets worse (paper: 0.5).
        patience: int >= 1. Epochs without a new best before stopping (paper: 3).
        max_epochs: int >= 1. Hard limit on epochs (paper: 64).
        decay_unless_best: bool. Decay when validation is not a new best, not only when it is
            worse than the previous epoch's (the character-output layer's rule).
        decay_from_epoch: optional int >= 1. Zaremba et al.'s schedule: decay after epoch k for
            every k >= this, whatever validation does (epochs 1 .. this at `learning_rate`).
            None: decay by validation, as above.

    Example:
    ```python
    from psmm_tf.training import PlateauSchedule

    schedule = PlateauSchedule(1.0, lr_decay=0.5, patience=3, max_epochs=64)
    for validation_perplexity in (150.0, 120.0, 121.0):
        decision = schedule.update(validation_perplexity)
    print(decision.learning_rate)   # halved after the epoch that did not improve
    ```
    """

    def __init__(self, learning_rate, lr_decay=0.5, patience=3, max_epochs=64,
                 decay_unless_best=False, decay_from_epoch=None, name=None):
        super().__init__(name=name)
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}.")
        if not 0.0 < lr_decay <= 1.0:
            raise ValueError(f"lr_decay must be in (0, 1], got {lr_decay!r}.")
        if decay_from_epoch is not None and (isinstance(decay_from_epoch, bool) or not (
                isinstance(decay_from_epoch, int) and decay_from_epoch >= 1)):
            raise ValueError(f"decay_from_epoch must be an integer >= 1 or None, got "
                             f"{decay_from_epoch!r}.")
        self.decay_from_epoch = decay_from_epoch
        self.lr_decay = float(lr_decay)
        self.patience = int(patience)
        self.max_epochs = int(max_epochs)
        self.decay_unless_best = decay_unless_best
        self.learning_rate = tf.Variable(float(learning_rate), dtype=tf.float64,
                                         trainable=False, name="learning_rate")
        self.best_perplexity = tf.Variable(math.inf, dtype=tf.float64, trainable=False,
                                           name="best_perplexity")
        self.previous_perplexity = tf.Variable(math.inf, dtype=tf.float64, trainable=False,
                                               name="previous_perplexity")
        self.bad_epochs = tf.Variable(0, dtype=tf.int64, trainable=False, name="bad_epochs")
        self.epochs_done = tf.Variable(0, dtype=tf.int64, trainable=False, name="epochs_done")

    @property
    def should_stop(self):
        """bool. Whether no further epoch should run (also right after a restore)."""
        return (int(self.bad_epochs.numpy()) >= self.patience
                or int(self.epochs_done.numpy()) >= self.max_epochs)

    def update(self, validation_perplexity):
        """Takes one epoch's validation perplexity; returns an `EpochDecision`."""
        ppl = float(validation_perplexity)
        if not math.isfinite(ppl):
            ppl = math.inf
        previous = float(self.previous_perplexity.numpy())
        best = float(self.best_perplexity.numpy())
        epoch = int(self.epochs_done.numpy()) + 1
        if self.decay_from_epoch is not None:  # Zaremba et al.: by epoch, not by validation
            decayed = epoch >= self.decay_from_epoch
        else:  # section 5.2: halve the rate when validation is worse than the previous epoch's
            decayed = ppl >= best if self.decay_unless_best else ppl > previous
        if decayed:
            self.learning_rate.assign(self.learning_rate * self.lr_decay)
        improved = ppl < best
        if improved:
            self.best_perplexity.assign(ppl)
            self.bad_epochs.assign(0)
        else:
            self.bad_epochs.assign_add(1)
        self.previous_perplexity.assign(ppl)
        self.epochs_done.assign_add(1)
        return EpochDecision(improved=improved, decayed=decayed, stop=self.should_stop,
                             learning_rate=float(self.learning_rate.numpy()))
