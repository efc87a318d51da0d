"""What a checkpoint holds to resume a run exactly (reading any checkpoint back, the one loop
that skips a damaged one, is `psmm_tf.checkpoints`: evaluation and export read them too).

The workdir's files are listed in `psmm_tf.workdir`; its `checkpoints/` holds
`tf.train.Checkpoint` files managed by `tf.train.CheckpointManager`.

A checkpoint holds, under these keys:
    model       the Keras model (weights; the key export code reads)
    optimizer   the optimizer's slots, iteration count and learning rate
    schedule    `PlateauSchedule`: learning rate, best / previous perplexity, bad epochs
    progress    epoch, step within it (the next window to read), global step
    epoch_seconds   the training seconds of that epoch up to the checkpoint (0 at an epoch's
                end), so a resumed epoch reports an unbroken one's time (`read_epoch_seconds`;
                0.2.0's checkpoints lack it: their resumed epoch counts from the resume)
    carry       the LSTM state and pointer memory carried into that next window, global rows
                (not in a character-output run's, whose `model` is its output layer)
    vocabulary  the sha256 of the run's vocabulary tokens (`vocab.sha256`'s), so a checkpoint
                is checked against the vocabulary it is loaded with
                (`psmm_tf.checkpoints.check_checkpoint_vocabulary`), not only against a
                file beside it; 0.1.0's checkpoints have no such key and are checked by
                `vocab.sha256` alone
Under `model` are every weight and the state of every dropout / zoneout / sampling
`SeedGenerator` (`track_random_states` gives each layer with one a `tf.Module` holding its
state), so a resumed run draws the masks an uninterrupted one draws.
`CheckpointManager.save` writes the files first and then updates the `checkpoint` index, so a
kill mid-write leaves the previous checkpoint as the latest. A checkpoint damaged later (a
truncated or corrupted file) is skipped by `restore_latest` for the one before it, saying so.
"""

import tensorflow as tf

from psmm_tf.checkpoints import checkpoint_paths, read_checkpoint_value, restore_first_readable


class Progress(tf.Module):
    """Where the run is: `epoch` (0-based), `step` (next window of that epoch), `global_step`,
    and the running sums of the epoch's metrics."""

    def __init__(self):
        super().__init__(name="progress")
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        # Sums of the epoch's step metrics so far (loss, nll, pointer loss, gate, weight), so a
        # resumed epoch reports the same training perplexity as an uninterrupted one.
        self.epoch_sums = tf.Variable(tf.zeros([5], tf.float64), trainable=False,
                                      name="epoch_sums")

    def set(self, epoch, step, global_step):
        self.epoch.assign(epoch)
        self.step.assign(step)
        self.global_step.assign(global_step)

    def get(self):
        """`(epoch, step, global_step)` as ints."""
        return (int(self.epoch.numpy()), int(self.step.numpy()),
                int(self.global_step.numpy()))


class Carry(tf.Module):
    """The carried LSTM state and pointer memory for all B streams, as variables.

    Args:
        state: tuple of `num_layers` pairs `(h, c)`, each `(B, H)`: shapes and dtypes to hold.
        memory: dict `hidden` `(B, M, D)`, `token_ids` `(B, M)`, `mask` `(B, M)`, or None.
    """

    def __init__(self, state, memory=None):
        super().__init__(name="carry")
        self.state = tf.nest.map_structure(self._variable, state)
        self.memory = None if memory is None else tf.nest.map_structure(self._variable, memory)

    @staticmethod
    def _variable(value):
        # Booleans (the memory mask) are held as int32, which every device's variables take.
        value = tf.convert_to_tensor(value)
        dtype = tf.int32 if value.dtype == tf.bool else value.dtype
        return tf.Variable(tf.zeros(value.shape, dtype), trainable=False)

    def assign(self, state, memory=None):
        tf.nest.map_structure(lambda v, x: v.assign(x), self.state, state)
        if self.memory is not None:
            tf.nest.map_structure(lambda v, x: v.assign(tf.cast(x, v.dtype)), self.memory,
                                  memory)

    def read(self):
        """`(state, memory)` as tensors."""
        state = tf.nest.map_structure(tf.convert_to_tensor, self.state)
        if self.memory is None:
            return state, None
        memory = tf.nest.map_structure(tf.convert_to_tensor, self.memory)
        memory["mask"] = tf.cast(memory["mask"], tf.bool)
        return state, memory


def track_random_states(model):
    """Makes `tf.train.Checkpoint(model=model)` save and restore every layer's random state.

    Keras tracks a `keras.random.SeedGenerator`'s state variable for `.keras` files, but TF's
    checkpoint does not see a SeedGenerator (the layers are backend-agnostic and hold no TF
    object), so a resumed run would draw other dropout, zoneout or sampling masks than an
    uninterrupted one. Each layer with a `seed_generator` therefore gets a `tf.Module` attribute
    `rng_checkpoint` holding the generator's state variable, which TF's checkpoint tracks and
    Keras' own tracking ignores (no variable is counted twice). Idempotent.

    Args:
        model: a Keras model (or layer).

    Returns:
        `model`.
    """
    for layer in model._flatten_layers(include_self=True, recursive=True):
        generator = getattr(layer, "seed_generator", None)
        if generator is None or getattr(layer, "rng_checkpoint", None) is not None:
            continue
        layer.rng_checkpoint = tf.Module()
        layer.rng_checkpoint.state = generator.state
    return model


def make_checkpoint(model, optimizer, schedule, progress, carry=None, vocabulary_sha256=None,
                    epoch_seconds=None):
    """The `tf.train.Checkpoint` of a run, with the keys listed in this module's docstring
    (`carry` when given: a character-output run carries nothing; `vocabulary` when
    `vocabulary_sha256`, a hex string, is given; `epoch_seconds`, a float64 `tf.Variable`,
    when given: a run checkpointed at epoch ends only has none)."""
    track_random_states(model)
    extra = {} if carry is None else {"carry": carry}
    if epoch_seconds is not None:
        extra["epoch_seconds"] = epoch_seconds
    if vocabulary_sha256 is not None:
        extra["vocabulary"] = tf.Variable(vocabulary_sha256, trainable=False, dtype=tf.string)
    return tf.train.Checkpoint(model=model, optimizer=optimizer, schedule=schedule,
                               progress=progress, **extra)


EPOCH_SECONDS_KEY = "epoch_seconds/.ATTRIBUTES/VARIABLE_VALUE"


def read_epoch_seconds(path):
    """The training seconds of the epoch that checkpoint `path` is in, up to it (0.0 at an
    epoch's end, and for 0.2.0's checkpoints, which do not record them)."""
    return float(read_checkpoint_value(path, EPOCH_SECONDS_KEY, default=0.0))


def make_manager(checkpoint, directory, max_to_keep):
    """A `tf.train.CheckpointManager` writing `ckpt-<global step>` files into `directory`."""
    return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep,
                                      checkpoint_name="ckpt")


class CheckpointRestoreError(RuntimeError):
    """No checkpoint of a run's directory could be read."""


def restore_latest(checkpoint, directory, partial=False):
    """Restores the newest readable checkpoint of `directory` into `checkpoint`.

    A checkpoint that cannot be read (truncated, corrupted, a shard missing) is skipped for the
    one before it, with a logged warning naming its files; a checkpoint of another model (its
    objects do not match) is an error, not skipped.

    Args:
        checkpoint: `tf.train.Checkpoint`.
        directory: str or path.
        partial: bool. True: `checkpoint` holds a part of the saved objects (e.g. the model
            only); False: every object of `checkpoint` must be in the file.

    Returns:
        The path restored, or None when `directory` holds no checkpoint.

    Raises:
        CheckpointRestoreError: every checkpoint is damaged (the message names each one).
        AssertionError: the checkpoint holds another model's objects.
    """
    path, failures = restore_first_readable(checkpoint, checkpoint_paths(directory),
                                            require_match=not partial)
    if path is not None:
        return path
    if failures:
        raise CheckpointRestoreError(
            f"No checkpoint of {directory} can be restored: {'; '.join(failures)}. The files "
            f"are damaged, or hold another model (a lost config.json resumed with other "
            f"settings?). Nothing was started from scratch over them; move the folder away to "
            f"start a new run.")
    return None
