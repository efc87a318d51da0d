"""Random generators whose state is saved by `tf.train.Checkpoint` as well as by Keras."""

import keras
import tensorflow as tf


def checkpointed_seed_generator(layer, seed):
    """A `keras.random.SeedGenerator` for `layer` whose state `tf.train.Checkpoint` also saves.

    Keras tracks the generator's state variable for `.keras` files, but `tf.train.Checkpoint`
    does not see a SeedGenerator, so a resumed run would draw other dropout, zoneout or sampling
    masks than an uninterrupted one. The state is therefore also held by a plain `tf.Module`
    attribute (`rng_checkpoint`), which TF's checkpoint tracks and Keras' own tracking ignores
    (no variable is counted twice).

    Args:
        layer: the Keras layer that owns the generator (one generator per layer).
        seed: optional int.

    Returns:
        The `keras.random.SeedGenerator`.
    """
    generator = keras.random.SeedGenerator(seed)
    layer.rng_checkpoint = tf.Module()
    layer.rng_checkpoint.state = generator.state
    return generator
