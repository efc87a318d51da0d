"""The character CNN against a NumPy version of Kim et al.'s encoder, and the input embedding
of words outside the vocabulary."""

import keras
import numpy as np

from psmm_tf import testing
from psmm_tf.data.spelling import NUM_CHARACTER_IDS, word_characters
from psmm_tf.layers import CharacterEmbedding

WORDS = ["<unk>", "<eos>", "the", "cat", "sat"]
FILTERS = ((1, 3), (2, 4), (3, 5))


def numpy_character_cnn(layer, chars):
    """Brute force: embed each character, every filter at every offset (valid convolution,
    tanh), max over offsets, highway, projection; `chars` `(N, W)` -> `(N, output_dim)`."""
    table = np.asarray(layer.char_embedding.embeddings)
    out = []
    for row in chars:
        x = table[row]  # (W, char_embedding_dim)
        pooled = []
        for conv in layer.convolutions:
            kernel, bias = (np.asarray(w) for w in conv.weights)  # (width, in, out), (out,)
            width = kernel.shape[0]
            responses = [np.tanh(np.einsum("wi,wio->o", x[t:t + width], kernel) + bias)
                         for t in range(len(row) - width + 1)]
            pooled.append(np.max(responses, axis=0))
        p = np.concatenate(pooled)
        gate_kernel, gate_bias = (np.asarray(w) for w in layer.highway_gate.weights)
        transform_kernel, transform_bias = (np.asarray(w) for w in
                                            layer.highway_transform.weights)
        g = 1.0 / (1.0 + np.exp(-(p @ gate_kernel + gate_bias)))
        y = g * np.maximum(p @ transform_kernel + transform_bias, 0.0) + (1.0 - g) * p
        out.append(y @ np.asarray(layer.projection.kernel))
    return np.stack(out)


class CharacterEmbeddingTest(testing.TestCase):

    def _layer(self):
        layer = CharacterEmbedding(len(WORDS), 6, max_word_length=8, char_embedding_dim=4,
                                   filters=FILTERS, seed=5)
        layer.set_vocabulary(WORDS)
        return layer

    def test_spelling_rows(self):
        self.assertAllEqual(word_characters(["ab"], 5), [[1, 3 + 97, 3 + 98, 2, 0]])
        self.assertEqual(NUM_CHARACTER_IDS, 259)

    def test_a_word_embedding_is_the_cnn_of_its_characters(self):
        layer = self._layer()
        ids = np.array([[2, 3, 4], [0, 1, 2]])
        expected = numpy_character_cnn(layer, word_characters([WORDS[i] for i in ids.ravel()],
                                                              8))
        self.assertAllClose(np.asarray(layer(ids)).reshape(6, 6), expected, atol=1e-5)

    def test_words_outside_the_vocabulary_get_their_own_embeddings(self):
        layer = self._layer()
        ids = np.array([[0, 0, 3]])  # "cats" and "dogs" are <unk> in the vocabulary
        chars = word_characters(["cats", "dogs", "cat"], 8)[None]
        spelled = np.asarray(layer(ids, token_chars=chars))[0]
        self.assertAllClose(spelled[:2], numpy_character_cnn(layer, chars[0, :2]), atol=1e-5)
        self.assertGreater(np.abs(spelled[0] - spelled[1]).max(), 1e-4)
        unk = np.asarray(layer(np.array([[0]])))[0, 0]
        self.assertGreater(np.abs(spelled[0] - unk).max(), 1e-4)
        # An in-vocabulary word reads the same from its id or its spelling.
        self.assertAllClose(spelled[2], np.asarray(layer(np.array([[3]])))[0, 0], atol=1e-6)

    def test_the_spelling_is_saved_with_the_layer(self):
        layer = self._layer()
        inputs = keras.Input((None,), dtype="int32")
        model = keras.Model(inputs, layer(inputs))
        path = self.get_temp_dir() + "/embedding.keras"
        model.save(path)
        loaded = keras.saving.load_model(path)
        ids = np.array([[2, 3, 4, 0]])
        self.assertAllClose(loaded(ids), model(ids))

    def test_a_vocabulary_of_another_size_is_refused(self):
        with self.assertRaisesRegex(ValueError, "set_vocabulary needs 5 words, got 2"):
            self._layer().set_vocabulary(["<unk>", "the"])


if __name__ == "__main__":
    testing.main()
