"""Exports of a model with character inputs: a word outside the vocabulary is read from its
spelling in every text signature, in one piece or streamed, as the Keras model reads it."""

import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from psmm_tf import testing as psmm_testing
from psmm_tf.data import Vocabulary
from psmm_tf.data.spelling import word_characters
from psmm_tf.export import STATE_NAMES, testing, tokenization
from psmm_tf.export.export_saved_model import export

W = 24  # ModelConfig.max_word_length's default


class CharacterInputExportTest(psmm_testing.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp()
        vocab_file = testing.write_vocabulary(os.path.join(cls.tmp, "vocab.txt"))
        cls.vocab = Vocabulary.load(vocab_file)
        cls.model, _ = testing.tiny_model(input_embedding="chars")
        cls.export_dir = export_dir = export(cls.model, vocab_file, os.path.join(cls.tmp, "base"))
        cls.signatures = tf.saved_model.load(export_dir).signatures

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def call(self, name, **inputs):
        return {k: v.numpy() for k, v in self.signatures[name](**inputs).items()}

    def keras_scores(self, text):
        """The Keras model's log-probabilities of a text's tokens, each input word spelled."""
        tokens = tokenization.reference_tokens(text)
        ids = self.vocab.encode(tokens)[None]
        read = ["<eos>"] + tokens[:-1]
        inputs = self.vocab.encode(read)[None]
        chars = word_characters(read, W)[None]
        return self.model.score_with_state(inputs, ids, token_chars=chars)["log_probs"].numpy()[0]

    def test_words_outside_the_vocabulary_are_read_from_their_spelling(self):
        # Outside words: plain, multi-byte, and longer than the 22 bytes a spelling keeps.
        texts = ["a zebra saw the quokka", "a <unk> saw the <unk>",
                 "a zébra saw the 日本", "a supercalifragilisticexpialidocious saw"]
        out = self.call("score_text", texts=tf.constant(texts))
        for row, text in enumerate(texts):
            expected = self.keras_scores(text)
            self.assertAllClose(out["log_probs"][row][:len(expected)], expected, atol=1e-5)
        self.assertAllEqual(out["token_ids"][0], out["token_ids"][1])  # both <unk>'s id
        # The word after "zebra" is scored after reading "zebra", not "<unk>".
        self.assertNotAllClose(out["log_probs"][0][2], out["log_probs"][1][2])
        self.assertAllClose(out["log_probs"][0][:2], out["log_probs"][1][:2], atol=1e-6)

    def test_streamed_lines_with_outside_words_equal_the_whole(self):
        lines = ["the cat saw a zebra", "zebra ran to the quokka", "", "quokka"]
        whole = self.call("score_text", texts=tf.constant(["\n".join(lines)]))
        self.assertAllClose(whole["log_probs"][0], self.keras_scores("\n".join(lines)),
                            atol=1e-5)
        state = self.call("initial_state", stream_ids=tf.range(1))
        self.assertEqual(sorted(state), sorted(STATE_NAMES))  # no state of its own
        log_probs = []
        for line in lines:  # every piece ends with its <eos>, which the next piece reads
            out = self.call("score_text_stream", texts=tf.constant([line + "\n"]), **state)
            state = {name: out[name] for name in STATE_NAMES}
            log_probs.append(out["log_probs"][0][:out["num_tokens"][0]])
        self.assertAllClose(np.concatenate(log_probs), whole["log_probs"][0], atol=1e-5)

    def test_the_spelling_ops_are_servable(self):
        self.assertEqual(testing.servability_problems(self.export_dir), [])

    def test_ids_signatures_read_the_vocabularys_words(self):
        text = "the cat sat on the mat\na dog ran"
        ids = self.vocab.encode(tokenization.reference_tokens(text))
        out = self.call("score", token_ids=tf.constant(ids[None], tf.int32),
                        lengths=tf.constant([len(ids)], tf.int32))
        self.assertAllClose(out["log_probs"][0], self.keras_scores(text), atol=1e-5)

    def test_predict_next_reads_the_context_words_spelling(self):
        out = self.call("predict_next", texts=tf.constant(["the zebra", "the <unk>"]),
                        k=tf.constant([3, 3]))
        self.assertNotAllClose(out["top_probs"][0], out["top_probs"][1])


if __name__ == "__main__":
    tf.test.main()
