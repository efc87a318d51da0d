"""Sampled (importance-sampling) softmax for large vocabularies (Jozefowicz et al. 2016)."""

import math

import keras
from keras import ops

from psmm_tf.layers.dense import Dense
from psmm_tf.layers.mixture import checked_ids

_NEGATIVE = -1e30


def log_uniform_sample(num_sampled, vocab_size, seed_generator):
    """Draws `num_sampled` ids with replacement from `P(k) = log((k + 2) / (k + 1)) / log(V + 1)`.

    Zipf-like: it suits vocabularies whose ids are sorted by decreasing frequency, as
    `psmm_tf.data.Vocabulary` sorts them. Drawn with Keras' seeded generator so that a resumed
    run draws the same samples.

    Returns:
        int32 ids `(num_sampled,)`.
    """
    uniform = keras.random.uniform((num_sampled,), seed=seed_generator, dtype="float32")
    ids = ops.cast(ops.floor(ops.exp(uniform * math.log(vocab_size + 1.0))), "int32") - 1
    return ops.clip(ids, 0, vocab_size - 1)


def log_expected_count(ids, num_sampled, vocab_size):
    """`log(S * P(k))`: how often `num_sampled` log-uniform draws hit each id, in log space."""
    ids = ops.cast(ids, "float32")
    probability = (ops.log(ids + 2.0) - ops.log(ids + 1.0)) / math.log(vocab_size + 1.0)
    return ops.log(num_sampled * probability)


def sampled_target_log_prob(target_logits, sampled_logits, targets, sampled_ids, vocab_size):
    """The importance-sampling estimate of `log softmax(logits)[target]`.

    The partition function is estimated as `Z ≈ exp(s_y) + (1/S) sum_j exp(s_kj) / P(k_j)` over the
    samples that are not the target: each sampled logit is corrected by `-log(S P(k))`, the
    target's own term is exact (Bengio and Senecal 2008; Jozefowicz et al. 2016, "importance
    sampling"). Unlike the sampled-softmax training loss, whose value is offset by
    `log(S P(y))`, the estimate is calibrated, as the pointer mixture `g p_vocab + p_ptr` needs.

    Args:
        target_logits: float `(B, T)`, the target word's logit.
        sampled_logits: float `(B, T, S)`, the sampled words' logits.
        targets: int `(B, T)`. sampled_ids: int `(S,)`. vocab_size: int V.

    Returns:
        float32 `(B, T)`.
    """
    sampled_ids = ops.cast(sampled_ids, "int32")
    count = ops.cast(ops.shape(sampled_ids)[0], "float32")
    target_logits = ops.cast(target_logits, "float32")
    sampled_logits = ops.cast(sampled_logits, "float32") - log_expected_count(
        sampled_ids, count, vocab_size)
    hits = ops.equal(ops.cast(targets, "int32")[..., None], sampled_ids[None, None, :])
    sampled_logits = ops.where(hits, _NEGATIVE, sampled_logits)
    all_logits = ops.concatenate([target_logits[..., None], sampled_logits], axis=-1)
    return target_logits - ops.logsumexp(all_logits, axis=-1)


@keras.saving.register_keras_serializable(package="psmm_tf")
class SampledSoftmax(Dense):
    """A vocabulary softmax layer trained on a sample of the vocabulary, evaluated in full.

    The weights are those of a `Dense(vocab_size)` layer (kernel `(D, V)`, bias `(V,)`), so a model
    trained with the sampled estimate evaluates with the exact softmax. In training,
    `sampled_log_prob` forms logits for the targets and `num_sampled` log-uniform samples shared by
    the batch only: `(B, T, S)` instead of `(B, T, V)`.

    Args:
        vocab_size: int. V.
        num_sampled: int. S, samples per training step.
        seed: optional int.

    Call arguments:
        hidden: float `(batch_size, T, D)`.

    Returns:
        Full logits `(batch_size, T, V)`.

    Example:
    ```python
    import numpy as np
    from psmm_tf.layers import SampledSoftmax

    head = SampledSoftmax(vocab_size=10000, num_sampled=256)
    hidden = np.random.default_rng(0).normal(size=(2, 7, 32)).astype("float32")
    logits = head(hidden)                                        # exact: (2, 7, 10000)
    log_p = head.sampled_log_prob(hidden, np.full((2, 7), 42))   # training estimate, (2, 7)
    ```
    """

    def __init__(self, vocab_size, num_sampled=1024, seed=None, **kwargs):
        kwargs.pop("units", None)
        super().__init__(vocab_size, **kwargs)
        if not isinstance(num_sampled, int) or num_sampled < 1:
            raise ValueError(f"num_sampled must be an integer >= 1, got {num_sampled!r}.")
        self.vocab_size = vocab_size
        self.num_sampled = num_sampled
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def sampled_log_prob(self, hidden, targets):
        """Estimate of `log p_vocab(targets)` from a fresh sample: float32 `(B, T)`."""
        targets = checked_ids("targets", targets, self.vocab_size)
        sampled_ids = log_uniform_sample(self.num_sampled, self.vocab_size, self.seed_generator)
        target_logits = (ops.einsum("btd,dbt->bt", hidden,
                                    ops.take(self.kernel, targets, axis=1))
                         + ops.take(self.bias, targets))
        sampled_logits = (ops.einsum("btd,ds->bts", hidden,
                                     ops.take(self.kernel, sampled_ids, axis=1))
                          + ops.take(self.bias, sampled_ids))
        return sampled_target_log_prob(target_logits, sampled_logits, targets, sampled_ids,
                                       self.vocab_size)

    def get_config(self):
        config = super().get_config()
        config.update({"vocab_size": self.vocab_size, "num_sampled": self.num_sampled,
                       "seed": self.seed})
        return config
