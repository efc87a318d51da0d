"""The character-LSTM output layer against a NumPy LSTM spelling words one byte at a time."""

import itertools

import numpy as np

from psmm_tf import testing
from psmm_tf.data.spelling import NUM_CHARACTER_IDS, word_characters
from psmm_tf.layers.char_lstm_output import CharacterLSTMOutput, trimmed_spellings

W = 8


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def numpy_next_character_probs(layer, hidden, prefix):
    """Brute force: p(next character | prefix, hidden) from the layer's weights, one LSTM step
    per character of `prefix` (a list of character ids starting with the begin marker)."""
    weights = lambda sub: [np.asarray(w, np.float64) for w in sub.weights]  # noqa: E731
    (table,) = weights(layer.char_embedding)
    z_kernel, z_bias = weights(layer.conditioning)
    kernel, recurrent, bias = weights(layer.lstm)
    out_kernel, out_bias = weights(layer.char_logits)
    z = np.asarray(hidden, np.float64) @ z_kernel + z_bias
    units = layer.units
    s = c = np.zeros(units)
    for char in prefix:  # Keras' gate order: input, forget, cell, output
        gates = np.concatenate([table[char], z]) @ kernel + s @ recurrent + bias
        i, f, g, o = (gates[k * units:(k + 1) * units] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        s = _sigmoid(o) * np.tanh(c)
    logits = s @ out_kernel + out_bias
    logits[:2] = -np.inf  # padding and the begin marker are never predicted
    logits -= logits.max()
    return np.exp(logits) / np.exp(logits).sum()


class CharacterLSTMOutputTest(testing.TestCase):

    def _layer(self):
        layer = CharacterLSTMOutput(units=6, max_word_length=W, char_embedding_dim=4, seed=3)
        layer(np.zeros((1, 5), "float32"), np.zeros((1, W), "int32"))
        return layer

    def test_word_probability_is_the_product_of_its_character_probabilities(self):
        layer = self._layer()
        words = ["the", "cat", "", "zyzzyva", "héllo", "a"]  # a truncated word, a 2-byte char
        chars = word_characters(words, W)
        hidden = np.random.default_rng(0).normal(size=(len(words), 5)).astype("float32")
        got = np.asarray(layer(hidden.reshape(2, 3, 5), chars.reshape(2, 3, W))).ravel()
        for k, row in enumerate(chars):
            spelled = [int(c) for c in row if c != 0]  # begin, bytes, end
            expected = sum(
                np.log(numpy_next_character_probs(layer, hidden[k], spelled[:j])[spelled[j]])
                for j in range(1, len(spelled)))
            self.assertAllClose(got[k], expected, atol=1e-6, msg=words[k])
        # "zyzzyva" keeps its first W - 2 = 6 bytes and the end marker.
        self.assertEqual(list(chars[3]).count(2), 1)

    def test_trimmed_spellings_score_as_the_full_width(self):
        layer = CharacterLSTMOutput(units=6, max_word_length=24, seed=3)
        chars = word_characters(["ab", "abcdefghi", "c"], 24)
        trimmed = trimmed_spellings(chars, multiple=4)
        self.assertEqual(trimmed.shape, (3, 12))  # 11 characters, rounded up to 12
        hidden = np.random.default_rng(4).normal(size=(3, 5)).astype("float32")
        self.assertAllClose(layer(hidden, trimmed), layer(hidden, chars), atol=1e-6)

    def test_padding_rows_score_zero(self):
        layer = self._layer()
        hidden = np.ones((2, 5), "float32")
        self.assertAllClose(layer(hidden, np.zeros((2, W), "int32")), [0.0, 0.0])

    def test_a_closed_vocabulary_sums_to_at_most_one(self):
        """Every word of up to 2 bytes over a 4-byte alphabet: at most 1, and exactly the mass
        the character LSTM leaves on those spellings, `sum_w p(w) = 1 - p(any other word)`,
        computed by brute force over the tree of prefixes."""
        layer = self._layer()
        alphabet = [3 + ord(c) for c in "abcd"]
        words = ["".join(w) for n in range(3) for w in itertools.product("abcd", repeat=n)]
        hidden = np.random.default_rng(1).normal(size=(1, 5)).astype("float32")
        probs = np.exp(np.asarray(layer(np.repeat(hidden, len(words), 0),
                                        word_characters(words, W)), np.float64))
        self.assertLessEqual(probs.sum(), 1.0)

        def listed_mass(prefix, depth):
            """p(a listed word | prefix): end here, or one of the alphabet and recurse."""
            p = numpy_next_character_probs(layer, hidden[0], prefix)
            mass = p[2]  # the end marker
            if depth < 2:
                mass += sum(p[c] * listed_mass(prefix + [c], depth + 1) for c in alphabet)
            return mass

        self.assertAllClose(probs.sum(), listed_mass([1], 0), rtol=1e-5)

    def test_the_whole_byte_alphabet_sums_to_one_over_one_character(self):
        """The end marker after one byte plus the mass of longer words: p("x") for every byte
        x, plus the mass of continuing, equals p(one byte) = 1 - p(empty word)."""
        layer = self._layer()
        hidden = np.random.default_rng(2).normal(size=(1, 5)).astype("float32")
        first = numpy_next_character_probs(layer, hidden[0], [1])
        self.assertAllClose(first.sum(), 1.0, atol=1e-9)
        self.assertEqual(first.shape, (NUM_CHARACTER_IDS,))
        one_byte = [chr(b) for b in range(32, 127)]
        probs = np.exp(np.asarray(layer(np.repeat(hidden, len(one_byte), 0),
                                        word_characters(one_byte, W)), np.float64))
        for b, p in zip(range(32, 127), probs, strict=True):
            after = numpy_next_character_probs(layer, hidden[0], [1, 3 + b])
            self.assertAllClose(p, first[3 + b] * after[2], rtol=1e-5)

    def test_dropout_only_in_training(self):
        layer = CharacterLSTMOutput(units=6, max_word_length=W, dropout=0.5, seed=3)
        hidden = np.ones((4, 5), "float32")
        chars = word_characters(["a", "b", "c", "d"], W)
        self.assertAllClose(layer(hidden, chars), layer(hidden, chars))
        self.assertNotAllClose(layer(hidden, chars), layer(hidden, chars, training=True))

    def test_char_dropout_only_in_training_one_mask_per_word(self):
        plain = CharacterLSTMOutput(units=6, max_word_length=W, seed=3)
        dropped = CharacterLSTMOutput(units=6, max_word_length=W, char_dropout=0.5, seed=3)
        hidden = np.ones((8, 5), "float32")
        chars = word_characters(["ab"] * 8, W)
        plain(hidden, chars)
        dropped(hidden, chars)
        dropped.set_weights(plain.get_weights())
        self.assertAllClose(dropped(hidden, chars), plain(hidden, chars))
        # What the character LSTM reads and what the logits read, in one training call.
        seen = {}

        def recording(layer, name):
            call = layer.call

            def record(inputs, *args, **kwargs):
                seen[name] = np.asarray(inputs)
                return call(inputs, *args, **kwargs)
            return record

        dropped.lstm.call = recording(dropped.lstm, "lstm")
        dropped.char_logits.call = recording(dropped.char_logits, "logits")
        trained = np.asarray(dropped(hidden, chars, training=True))
        self.assertNotAllClose(trained, np.asarray(plain(hidden, chars)))
        for name in ("lstm", "logits"):
            zeros = seen[name] == 0.0  # (8 words, 3 characters, units)
            # One mask per word: the units it drops are dropped at each of its characters...
            self.assertAllEqual(zeros, np.repeat(zeros[:, :1], zeros.shape[1], axis=1))
            self.assertTrue(0.2 < zeros.mean() < 0.8, msg=name)
            # ... and eight copies of one word draw eight masks.
            self.assertGreater(len({row.tobytes() for row in zeros[:, 0]}), 1, msg=name)

    def test_a_config_without_char_dropout_loads_without_it(self):
        config = CharacterLSTMOutput(units=4, max_word_length=W, seed=1).get_config()
        del config["char_dropout"]  # as 0.8 saved it
        layer = CharacterLSTMOutput.from_config(config)
        self.assertEqual(layer.char_dropout, 0.0)
        self.assertFalse(hasattr(layer, "char_input_dropout"))

    def test_bad_settings_are_refused(self):
        with self.assertRaisesRegex(ValueError, "max_word_length"):
            CharacterLSTMOutput(units=4, max_word_length=2)
        with self.assertRaisesRegex(ValueError, "dropout"):
            CharacterLSTMOutput(units=4, dropout=1.0)
        with self.assertRaisesRegex(ValueError, "char_dropout must be in"):
            CharacterLSTMOutput(units=4, char_dropout=-0.1)

    def test_serialization(self):
        self.run_serialization_test(CharacterLSTMOutput(units=4, max_word_length=W, seed=1))
        self.run_serialization_test(CharacterLSTMOutput(units=4, max_word_length=W,
                                                        char_dropout=0.2, seed=1))


if __name__ == "__main__":
    testing.main()
