"""Spellings of a corpus's tokens, and the windows that carry them to a character-input model."""

import numpy as np
import tensorflow as tf

from psmm_tf.data import Vocabulary
from psmm_tf.data.corpus_setup import Corpus
from psmm_tf.data.pipeline import evaluation_windows, training_windows
from psmm_tf.data.spelling import spell_splits, word_characters
from psmm_tf.data.windows import iter_training_windows

VOCABULARY = Vocabulary(["<unk>", "<eos>", "the", "cat", "sat"])
TRAIN = "the cat sat <eos> the dog sat <eos> a cat sat <eos>".split()
VALID = "the cow sat <eos> the dog ran <eos>".split()


class SpellingTest(tf.test.TestCase):

    def test_words_outside_the_vocabulary_follow_it_in_order_of_appearance(self):
        spellings = spell_splits({"train": TRAIN, "valid": VALID}, VOCABULARY, 8)
        train, valid = spellings["train"], spellings["valid"]
        # dog, a (train), then cow, ran (valid): ids 5, 6, 7, 8.
        self.assertAllEqual(train.ids, [2, 3, 4, 1, 2, 5, 4, 1, 6, 3, 4, 1])
        self.assertAllEqual(valid.ids, [2, 7, 4, 1, 2, 5, 8, 1])
        self.assertIs(train.table, valid.table)
        words = list(VOCABULARY.tokens) + ["dog", "a", "cow", "ran"]
        self.assertAllEqual(train.table, word_characters(words, 8))
        self.assertAllEqual(valid.characters(np.array([1])), word_characters(["cow"], 8))
        # The ids say <unk> where the spelling says the word.
        self.assertAllEqual(VOCABULARY.encode(VALID)[[1, 6]], [0, 0])
        self.assertLen(train[:5], 5)

    def test_a_corpus_gives_the_spelling_of_a_slice_of_a_split_or_none(self):
        ids = {"train": VOCABULARY.encode(TRAIN), "valid": VOCABULARY.encode(VALID)}
        words = Corpus(VOCABULARY, ids, np.zeros(5, np.int64), "/tmp")
        self.assertIsNone(words.spelling("valid", stop=3))
        chars = Corpus(VOCABULARY, ids, np.zeros(5, np.int64), "/tmp",
                       spell_splits({"train": TRAIN, "valid": VALID}, VOCABULARY, 8))
        self.assertAllEqual(chars.spelling("valid").ids, [2, 7, 4, 1, 2, 5, 8, 1])
        self.assertAllEqual(chars.spelling("valid", 1, 3).ids, [7, 4])
        self.assertAllEqual(chars.spelling("valid", stop=2).ids, [2, 7])

    def test_training_windows_carry_each_tokens_characters(self):
        spelling = spell_splits({"train": TRAIN}, VOCABULARY, 8)["train"]
        ids = VOCABULARY.encode(TRAIN)
        for context in (0, 2):
            for batch in training_windows(ids, batch_size=2, context_length=context,
                                          num_predicted=2, spelling=spelling):
                chars = batch["token_chars"].numpy()
                self.assertEqual(chars.shape, (2, context + 2, 8))
                for b, t in np.ndindex(2, context + 2):
                    token = batch["token_ids"].numpy()[b, t]
                    if not batch["token_mask"].numpy()[b, t]:
                        self.assertAllEqual(chars[b, t], np.zeros(8))
                    elif token != 0:  # in the vocabulary: its own spelling
                        self.assertAllEqual(chars[b, t], spelling.table[token])
                    else:  # outside it: one of the words the ids call <unk>
                        word = bytes(c - 3 for c in chars[b, t] if c > 2).decode()
                        self.assertIn(word, ("dog", "a"))

    def test_numpy_training_windows_carry_the_same_characters(self):
        spelling = spell_splits({"train": TRAIN}, VOCABULARY, 8)["train"]
        ids = VOCABULARY.encode(TRAIN)
        for context in (0, 2):
            expected = training_windows(ids, batch_size=2, context_length=context,
                                        num_predicted=2, spelling=spelling)
            listed = list(iter_training_windows(ids, 2, context, 2, spelling=spelling))
            self.assertLen(listed, int(expected.cardinality()))
            for window, reference in zip(listed, expected, strict=True):
                self.assertEqual(window["token_chars"].dtype, np.int32)
                self.assertAllEqual(window["token_chars"], reference["token_chars"])

    def test_evaluation_windows_carry_each_tokens_characters(self):
        spelling = spell_splits({"valid": VALID}, VOCABULARY, 8)["valid"]
        ids = VOCABULARY.encode(VALID)
        batches = list(evaluation_windows(ids, batch_size=1, length=3, spelling=spelling))
        chars = np.concatenate([b["token_chars"].numpy()[0] for b in batches])
        self.assertAllEqual(chars[:len(ids) - 1], spelling.characters(np.arange(len(ids) - 1)))
        self.assertAllEqual(chars[len(ids) - 1:], np.zeros_like(chars[len(ids) - 1:]))

    def test_a_spelling_of_other_tokens_is_refused(self):
        spelling = spell_splits({"valid": VALID}, VOCABULARY, 8)["valid"]
        with self.assertRaisesRegex(ValueError, "spelling spells 8 tokens; ids has 5"):
            evaluation_windows(VOCABULARY.encode(VALID)[:5], spelling=spelling)


if __name__ == "__main__":
    tf.test.main()
