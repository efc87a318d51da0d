"""Tests of the input-to-output gate: the equation in NumPy, frozen base, save/load."""


import keras
import numpy as np
import tensorflow as tf
from keras import ops

from psmm_tf import testing
from psmm_tf.losses import PointerSentinelLoss
from psmm_tf.models import InputOutputGateLM, LSTMLanguageModel, PointerSentinelLM

VOCAB = 13


def _base(cls):
    return testing.language_model(cls, vocab_size=VOCAB, embedding_dim=5, hidden_dim=6,
        num_layers=1, window_size=3, seed=2)


class InputOutputGateLMTest(testing.TestCase):

    def test_softmax_of_gated_logits(self):
        base = _base(LSTMLanguageModel)
        model = InputOutputGateLM(base, embedding_dim=4, seed=1)
        text = self.rng.integers(0, VOCAB, size=(2, 7)).astype("int32")
        actual = ops.convert_to_numpy(
            model.score_with_state(text[:, :-1], text[:, 1:])["log_probs"])
        logits = ops.convert_to_numpy(base(text[:, :-1])["vocab_logits"])
        embedding = ops.convert_to_numpy(model.gate.embedding.embeddings)
        kernel, bias = (ops.convert_to_numpy(w) for w in model.gate.projection.weights)
        gate = 1 / (1 + np.exp(-(embedding[text[:, :-1]] @ kernel + bias)))  # g = σ(W e'(x) + b)
        gated = gate * logits
        log_softmax = gated - np.log(np.exp(gated).sum(-1, keepdims=True))
        expected = np.take_along_axis(log_softmax, text[:, 1:, None], -1)[..., 0]
        self.assertAllClose(actual, expected, atol=1e-5)

    def test_quantize_is_refused_naming_the_wrapped_model(self):
        model = InputOutputGateLM(_base(LSTMLanguageModel), embedding_dim=4, seed=1)
        before = [ops.convert_to_numpy(w) for w in model.weights]
        with self.assertRaisesRegex(ValueError, r"quantize\('int8'\): an InputOutputGateLM is not "
                                                r"quantized .*quantize the model it wraps"):
            model.quantize("int8")
        self.assertEqual([layer.name for layer in model._flatten_layers()
                          if layer.quantization_mode], [])
        for weight, value in zip(model.weights, before, strict=True):
            self.assertAllEqual(weight, value)

    def test_a_new_gate_starts_close_to_the_identity(self):
        base = _base(LSTMLanguageModel)
        model = InputOutputGateLM(base, embedding_dim=4, seed=1)
        text = self.rng.integers(0, VOCAB, size=(2, 7)).astype("int32")
        gate = ops.convert_to_numpy(model.gate(text))
        self.assertGreater(gate.min(), 0.9)  # sigmoid(3) = 0.953, plus W e' near 0
        gated = ops.convert_to_numpy(model.score_with_state(text[:, :-1], text[:, 1:])["log_probs"])
        plain = ops.convert_to_numpy(base.score_with_state(text[:, :-1], text[:, 1:])["log_probs"])
        self.assertAllClose(gated, plain, atol=0.1 * np.abs(plain).max())

    @testing.skip_unless_tensorflow()  # tf.GradientTape / tf.function
    def test_training_changes_only_the_gate(self):
        base = _base(PointerSentinelLM)
        model = InputOutputGateLM(base, embedding_dim=4, dropout=0.5, seed=1)
        self.assertEqual(len(model.trainable_weights), 3)  # embedding, kernel, bias of the gate
        before = [ops.convert_to_numpy(w).copy() for w in base.weights]
        text = self.rng.integers(0, VOCAB, size=(2, 7)).astype("int32")
        optimizer = keras.optimizers.Adam(0.01)
        with tf.GradientTape() as tape:
            loss = PointerSentinelLoss()(text[:, 1:], model(text[:, :-1], training=True))
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        for old, weight in zip(before, base.weights):
            self.assertAllEqual(old, ops.convert_to_numpy(weight))
        self.assertTrue(all(float(tf.reduce_sum(tf.abs(g))) > 0 for g in
                            map(tf.convert_to_tensor, grads)))

    # The .keras file read back in a fresh process, on either backend: language_model_test.py's
    # test_keras_files_load_here_and_in_a_fresh_process_on_the_other_backend (one child for
    # every model's file).


if __name__ == "__main__":
    tf.test.main()
