"""Tests of the sampled and CNN softmaxes: sampler, estimator, exact evaluation, no [B, T, V]."""

import math

import keras
import numpy as np
import tensorflow as tf

from psmm_tf import testing
from psmm_tf.data.spelling import word_characters
from psmm_tf.layers import CNNSoftmax, SampledSoftmax
from psmm_tf.layers.sampled_softmax import log_uniform_sample, sampled_target_log_prob


def log_softmax_at(logits, targets):
    logits = np.asarray(logits, np.float64)
    log_z = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    return np.take_along_axis(logits, targets[..., None], -1)[..., 0] - log_z


class SamplerTest(testing.TestCase):

    def test_log_uniform_frequencies(self):
        vocab = 50
        ids = np.asarray(log_uniform_sample(200_000, vocab, keras.random.SeedGenerator(1)))
        freq = np.bincount(ids, minlength=vocab) / len(ids)
        expected = np.log((np.arange(vocab) + 2) / (np.arange(vocab) + 1)) / math.log(vocab + 1)
        self.assertAllClose(freq, expected, atol=3e-3)
        self.assertEqual((ids.min(), ids.max()), (0, vocab - 1))

    def test_estimator_matches_numpy_formula(self):
        vocab, num_sampled = 20, 6
        target_logits = self.rng.normal(size=(2, 3))
        sampled_logits = self.rng.normal(size=(2, 3, num_sampled))
        targets = np.array([[1, 4, 7], [0, 2, 19]], "int32")
        sampled = np.array([4, 0, 11, 4, 3, 19], "int32")
        actual = sampled_target_log_prob(target_logits, sampled_logits, targets, sampled, vocab)

        def log_count(k):
            return math.log(num_sampled * math.log((k + 2) / (k + 1)) / math.log(vocab + 1))

        expected = np.zeros((2, 3))
        for b in range(2):
            for t in range(3):
                true = target_logits[b, t]  # the target's term is exact
                others = [sampled_logits[b, t, s] - log_count(k) for s, k in enumerate(sampled)
                          if k != targets[b, t]]  # samples of the target removed
                expected[b, t] = true - np.log(np.exp([true] + others).sum())
        self.assertAllClose(actual, expected, atol=1e-5)


class SampledSoftmaxTest(testing.TestCase):

    def test_full_logits_are_a_dense_layer_and_estimate_converges(self):
        vocab = 40
        layer = SampledSoftmax(vocab, num_sampled=50_000, seed=3)
        hidden = self.rng.normal(size=(2, 3, 5)).astype("float32")
        logits = np.asarray(layer(hidden))
        kernel, bias = layer.kernel.numpy(), layer.bias.numpy()
        self.assertAllClose(logits, hidden @ kernel + bias, atol=1e-5)
        targets = self.rng.integers(0, vocab, size=(2, 3)).astype("int32")
        estimate = np.asarray(layer.sampled_log_prob(hidden, targets))
        self.assertAllClose(estimate, log_softmax_at(logits, targets), atol=0.05)

    @testing.skip_unless_tensorflow("inspects the TF graph")
    def test_training_graph_forms_no_vocabulary_sized_tensor(self):
        vocab = 5003
        layer = SampledSoftmax(vocab, num_sampled=64)
        layer.build((None, None, 8))
        hidden = tf.TensorSpec((2, 3, 8), tf.float32)
        targets = tf.TensorSpec((2, 3), tf.int32)

        def loss_and_grads(hidden, targets):
            with tf.GradientTape() as tape:
                loss = -tf.reduce_mean(layer.sampled_log_prob(hidden, targets))
            return tape.gradient(loss, layer.trainable_weights)

        graph = tf.function(loss_and_grads).get_concrete_function(hidden, targets).graph
        shapes = [out.shape for op in graph.get_operations() for out in op.outputs
                  if out.shape.rank and out.shape.rank >= 3]
        self.assertFalse([s for s in shapes if s[-1] == vocab], shapes)

    def test_xla_compiles_a_sampled_step(self):
        layer = SampledSoftmax(30, num_sampled=8, seed=1)
        hidden = self.rng.normal(size=(2, 3, 4)).astype("float32")
        targets = self.rng.integers(0, 30, size=(2, 3)).astype("int32")
        layer(hidden)

        def sampled(values, hidden, targets):
            # The seed state is an input: XLA / jax.jit cannot assign a variable.
            with keras.StatelessScope(state_mapping=list(zip(layer.variables, values))):
                return layer.sampled_log_prob(hidden, targets)

        values = [v.value for v in layer.variables]
        out = np.asarray(testing.compiled(sampled)(values, hidden, targets))
        self.assertTrue(np.all(np.isfinite(out)) and np.all(out <= 0))
        if keras.backend.backend() == "jax":  # TF's XLA may draw other samples than eager TF
            self.assertAllClose(out, sampled(values, hidden, targets), atol=1e-5)

    def test_config_round_trip(self):
        layer = SampledSoftmax(30, num_sampled=8, seed=1, name="head")
        clone = SampledSoftmax.from_config(layer.get_config())
        self.assertEqual((clone.vocab_size, clone.num_sampled, clone.units), (30, 8, 30))
        with self.assertRaisesRegex(ValueError, "num_sampled must be an integer >= 1"):
            SampledSoftmax(30, num_sampled=0)


class CNNSoftmaxTest(testing.TestCase):

    def _layer(self, words, num_sampled=32):
        layer = CNNSoftmax(len(words), 6, num_sampled=num_sampled, max_word_length=8,
                           char_embedding_dim=4, filters=((1, 3), (2, 5)), correction_dim=2,
                           seed=2)
        layer.build()
        layer.set_vocabulary(words)
        return layer

    def test_spelling(self):
        rows = word_characters(["ab", "é", "abcdefghij"], 6)
        self.assertAllEqual(rows[0], [1, 3 + 97, 3 + 98, 2, 0, 0])
        self.assertAllEqual(rows[1], [1, 3 + 0xC3, 3 + 0xA9, 2, 0, 0])  # UTF-8 bytes of é
        self.assertAllEqual(rows[2], [1, 3 + 97, 3 + 98, 3 + 99, 3 + 100, 2])

    def test_sampled_estimate_approaches_the_exact_softmax(self):
        words = ["<unk>", "<eos>", "the", "cat", "sat", "on", "mat", "dog", "ran", "a"]
        layer = self._layer(words, num_sampled=60_000)
        hidden = self.rng.normal(size=(2, 3, 6)).astype("float32")
        targets = self.rng.integers(0, len(words), size=(2, 3)).astype("int32")
        exact = log_softmax_at(np.asarray(layer(hidden)), targets)
        self.assertAllClose(layer.sampled_log_prob(hidden, targets), exact, atol=0.05)

    def test_words_spelled_alike_get_embeddings_from_their_characters(self):
        layer = self._layer(["cat", "cats", "dog"])
        layer.correction.assign(np.zeros_like(layer.correction.numpy()))
        embeddings = np.asarray(layer.word_embeddings(np.array([0, 1, 2, 0], "int32")))
        self.assertAllClose(embeddings[0], embeddings[3])  # same word, same spelling
        self.assertNotAllClose(embeddings[0], embeddings[1])

    def test_rejects_a_vocabulary_of_the_wrong_size(self):
        layer = self._layer(["a", "b"])
        with self.assertRaisesRegex(ValueError, "set_vocabulary needs 2 words, got 3"):
            layer.set_vocabulary(["a", "b", "c"])


if __name__ == "__main__":
    tf.test.main()
