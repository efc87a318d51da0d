"""Language models with sampled and CNN softmaxes: training estimate, exact evaluation, saving."""


import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from keras import ops

from psmm_tf import configs, testing
from psmm_tf.losses import PointerSentinelLoss
from psmm_tf.models import PointerSentinelLM, build_model, expected_parameter_count

WORDS = ["<unk>", "<eos>"] + [f"w{i}" for i in range(38)]


def _model(softmax, num_sampled=16):
    model = testing.language_model(PointerSentinelLM, vocab_size=len(WORDS), embedding_dim=6,
        hidden_dim=8, num_layers=1, window_size=4, seed=5, softmax=softmax,
        num_sampled=num_sampled, max_word_length=6)
    model.set_vocabulary(WORDS)
    return model


class LargeVocabularyTest(testing.TestCase, parameterized.TestCase):

    @parameterized.parameters("sampled", "cnn")
    def test_training_uses_the_estimate_and_evaluation_is_exact(self, softmax):
        model = _model(softmax)
        text = self.rng.integers(0, len(WORDS), size=(2, 9)).astype("int32")
        train_out = model(text[:, :-1], targets=text[:, 1:], training=True)
        self.assertNotIn("vocab_logits", train_out)
        self.assertEqual(tuple(train_out["target_vocab_log_prob"].shape), (2, 8))
        loss = PointerSentinelLoss()(text[:, 1:], train_out)
        self.assertTrue(np.isfinite(float(loss)))
        eval_out = model(text[:, :-1], targets=text[:, 1:], training=False)
        self.assertEqual(tuple(eval_out["vocab_logits"].shape), (2, 8, len(WORDS)))
        dist = ops.convert_to_numpy(model.distribution(eval_out))
        self.assertAllClose(dist.sum(-1), np.ones((2, 8)), atol=1e-5)

    @testing.skip_unless_tensorflow()  # tf.GradientTape / tf.function
    @parameterized.parameters("sampled", "cnn")
    def test_xla_training_step(self, softmax):
        model = _model(softmax)
        text = self.rng.integers(0, len(WORDS), size=(2, 9)).astype("int32")

        def step(inputs, targets):
            with tf.GradientTape() as tape:
                outputs = model(inputs, targets=targets, context_length=3, training=True)
                loss = PointerSentinelLoss()(targets, outputs)
            return loss, tape.gradient(loss, model.trainable_weights)

        loss, grads = tf.function(step, jit_compile=True)(text[:, :-1], text[:, 4:])
        self.assertTrue(np.isfinite(float(loss)))
        self.assertTrue(all(g is not None for g in grads))

    # The CNN softmax's .keras file, spelling kept, read back in a fresh process on either
    # backend: language_model_test.py's
    # test_keras_files_load_here_and_in_a_fresh_process_on_the_other_backend.

    @parameterized.parameters("full", "sampled", "cnn")
    def test_parameter_count(self, softmax):
        model_config = configs.dataclasses.replace(
            configs.get_preset("tiny").model, vocab_size=len(WORDS), softmax=softmax)
        model = build_model(model_config)
        # Trainable weights: the CNN softmax's spelling table is a constant, not a parameter.
        trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
        self.assertEqual(trainable, expected_parameter_count(model_config))

    def test_rejects_unknown_softmax(self):
        with self.assertRaisesRegex(ValueError, "softmax must be one of"):
            _model("hierarchical")


if __name__ == "__main__":
    tf.test.main()
