"""per_target_losses: the objective against NumPy versions of eq. 3, with the pointer's share."""

import keras
import numpy as np

from psmm_tf import testing
from psmm_tf.losses import per_target_losses
from psmm_tf.models import LSTMBackbone, LSTMLanguageModel, PointerSentinelLM

VOCAB, WINDOW = 9, 4


def _outputs(cls, seed=0):
    model = cls(LSTMBackbone(VOCAB, 6, 8, 1, seed=seed), window_size=WINDOW, seed=seed)
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (2, 5)).astype("int32")
    targets = rng.integers(0, VOCAB, (2, 5)).astype("int32")
    outputs = model(ids, memory=model.empty_memory(2), training=False)
    return model, outputs, targets


class PerTargetLossesTest(testing.TestCase):
    def test_the_pointer_share_mixes_the_softmax_with_the_model(self):
        model, outputs, targets = _outputs(PointerSentinelLM)
        to_numpy = keras.ops.convert_to_numpy
        logits, attention, gate, key_ids = (to_numpy(outputs[k]) for k in (
            "vocab_logits", "attention", "gate", "key_ids"))
        vocab = np.exp(testing.reference_mixture_log_prob(
            logits, np.zeros_like(attention), np.ones_like(gate), key_ids, targets))
        mixture = np.exp(testing.reference_mixture_log_prob(
            logits, attention, gate, key_ids, targets))
        for share in (0.0, 0.3, 1.0):
            expected = -np.log((1 - share) * vocab + share * mixture)
            objective, pointer_part, reported_gate = per_target_losses(
                model, outputs, targets, pointer_weight=0.0, pointer_share=share)
            self.assertAllClose(objective, expected, atol=1e-5, msg=f"share {share}")
            self.assertAllClose(pointer_part, np.zeros_like(expected))
            self.assertAllClose(reported_gate, gate)  # the model's gate, not the mixed one
        # Share 1 is the model's own objective, exactly.
        plain, _, _ = per_target_losses(model, outputs, targets, pointer_weight=0.0)
        shared, _, _ = per_target_losses(model, outputs, targets, pointer_weight=0.0,
                                         pointer_share=1.0)
        self.assertAllEqual(to_numpy(plain), to_numpy(shared))

    def test_a_model_without_pointer_ignores_the_share(self):
        model, outputs, targets = _outputs(LSTMLanguageModel)
        plain, _, gate = per_target_losses(model, outputs, targets)
        shared, _, _ = per_target_losses(model, outputs, targets, pointer_share=0.2)
        self.assertAllEqual(keras.ops.convert_to_numpy(plain), keras.ops.convert_to_numpy(shared))
        self.assertAllEqual(keras.ops.convert_to_numpy(gate), np.ones(targets.shape))


if __name__ == "__main__":
    import tensorflow as tf

    tf.test.main()
