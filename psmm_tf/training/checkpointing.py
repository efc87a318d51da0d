"""The workdir contract and what a checkpoint holds to resume a run exactly.

A run's workdir:
    config.json         `ExperimentConfig.to_json()` of the run (vocab_size and seeds resolved)
    vocab.txt           `Vocabulary.save`: one token per line, line number = id
    checkpoints/        `tf.train.Checkpoint` files managed by `tf.train.CheckpointManager`
    model.keras         `model.save` of the best model so far by validation perplexity
    history.json        one record per finished epoch (perplexities, learning rate, timing)
    steps.jsonl         one JSON line per training step (epoch, step, loss, lr)
    results.json        the best model's validation and test perplexity, at the end
    initial_pointer.npz the pointer's weights before the first step (models with a sentinel)
    tensorboard/        `tf.summary` scalars

A checkpoint holds, under these keys:
    model       the Keras model (weights; the key export code reads)
    optimizer   the optimizer's slots, iteration count and learning rate
    schedule    `PlateauSchedule`: learning rate, best / previous perplexity, bad epochs
    progress    epoch, step within it (the next window to read), global step
    carry       the LSTM state and pointer memory carried into that next window, global rows
Under `model` are every weight and the state of every dropout / zoneout / sampling
`SeedGenerator` (each layer holds its generator's state in a `tf.Module`, see
`psmm_tf.layers.random_state`), so a resumed run draws the masks an uninterrupted one draws.
Checkpoints written before that held copies under two more keys, `weights` and `rng`; they
restore into this object graph unchanged (a restore matches the objects it has, and the extra
keys point at the same saved values).
`CheckpointManager.save` writes the files first and then updates the `checkpoint` index, so a
kill mid-write leaves the previous checkpoint as the latest.
"""

import tensorflow as tf

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
CHECKPOINT_DIR = "checkpoints"
MODEL_FILE = "model.keras"
HISTORY_FILE = "history.json"
STEPS_FILE = "steps.jsonl"
RESULTS_FILE = "results.json"
# The pointer's weights at the start of training (W, b, s), for the pointer diagnostics.
INITIAL_POINTER_FILE = "initial_pointer.npz"
TENSORBOARD_DIR = "tensorboard"


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


def make_checkpoint(model, optimizer, schedule, progress, carry):
    """The `tf.train.Checkpoint` of a run, with the keys listed in this module's docstring."""
    return tf.train.Checkpoint(model=model, optimizer=optimizer, schedule=schedule,
                               progress=progress, carry=carry)


def make_manager(checkpoint, directory, max_to_keep):
    """A `tf.train.CheckpointManager` writing `ckpt-<global step>` files into `directory`."""
    return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep,
                                      checkpoint_name="ckpt")


def restore_model_weights(model, directory):
    """Restores all of the model's weights from the latest checkpoint in `directory`.

    Returns:
        The checkpoint path restored, or None when there is none.
    """
    path = tf.train.latest_checkpoint(directory)
    if path is not None:
        tf.train.Checkpoint(model=model).restore(path).expect_partial()
    return path
