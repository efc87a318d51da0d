"""Tests of the synthetic copy corpus: reproducible, copyable entities, disjoint held-out names."""

import collections
import tempfile
from pathlib import Path

import tensorflow as tf

from psmm_tf import testing
from psmm_tf.data import corpus, synthetic
from psmm_tf.data.vocabulary import Vocabulary


def _stream(lines):
    return [t for line in lines for t in corpus.line_tokens(line)]


class SyntheticTest(testing.TestCase):
    def test_reproducible_from_seed_and_different_across_seeds(self):
        first = synthetic.generate_corpus(3000, seed=5)
        self.assertEqual(synthetic.generate_corpus(3000, seed=5), first)
        other = synthetic.generate_corpus(3000, seed=6)
        self.assertNotEqual(other, first)
        # Different seeds share grammar words but almost no entities.
        shared = synthetic.entity_tokens(first) & synthetic.entity_tokens(other)
        self.assertLess(len(shared), 5)

    def test_size_and_format(self):
        lines = synthetic.generate_corpus(5000, seed=1)
        stream = _stream(lines)
        self.assertGreaterEqual(len(stream), 5000)
        self.assertLess(len(stream), 5000 + 40)  # Stops at the first line end past 5000.
        for line in lines:
            self.assertEqual(line, line.lower())
            self.assertEqual(line, " ".join(line.split()))
            self.assertTrue(line.endswith(" ."))

    def test_entities_are_rare_and_recur_within_a_few_sentences(self):
        stream = _stream(synthetic.generate_corpus(20_000, seed=2))
        entity_positions = [
            i for i, t in enumerate(stream) if t not in synthetic.COMMON_WORDS and t != "<eos>"
        ]
        counts = collections.Counter(stream[i] for i in entity_positions)
        # Many distinct entities, each used a handful of times (in its document only).
        self.assertGreater(len(counts), 800)
        self.assertLess(max(counts.values()), 25)
        self.assertGreater(len(entity_positions) / len(stream), 0.12)
        # Most mentions repeat a token of the last 100 words: copyable by a pointer of L = 100.
        copyable = sum(stream[i] in stream[max(0, i - 100) : i] for i in entity_positions)
        self.assertGreater(copyable / len(entity_positions), 0.6)

    def test_exclude_entities(self):
        train = synthetic.generate_corpus(5000, seed=3)
        excluded = synthetic.entity_tokens(train)
        held_out = synthetic.generate_corpus(5000, seed=3, exclude_entities=excluded)
        self.assertFalse(synthetic.entity_tokens(held_out) & excluded)

    def test_write_synthetic_splits(self):
        directory = Path(tempfile.mkdtemp(dir=self.get_temp_dir()))
        paths = synthetic.write_synthetic_splits(
            directory, seed=4, train_tokens=20_000, valid_tokens=3000, test_tokens=3000
        )
        self.assertEqual(sorted(paths), ["test", "train", "valid", "vocab"])
        splits = corpus.load_splits(directory, "text")
        self.assertBetween(len(splits["train"]), 20_000, 20_040)
        self.assertBetween(len(splits["valid"]), 3000, 3040)
        entities = {
            s: set(t for t in splits[s] if t not in synthetic.COMMON_WORDS) - {"<eos>"}
            for s in splits
        }
        self.assertFalse(entities["train"] & entities["valid"])
        self.assertFalse(entities["train"] & entities["test"])
        self.assertFalse(entities["valid"] & entities["test"])
        vocab = Vocabulary.load(paths["vocab"])
        train_vocab = Vocabulary.build(splits["train"])
        # vocab.txt = the training vocabulary, then the held-out entities (no <unk> in valid).
        self.assertEqual(vocab.tokens[: len(train_vocab)], train_vocab.tokens)
        self.assertEqual(
            set(vocab.tokens[len(train_vocab) :]), entities["valid"] | entities["test"]
        )
        self.assertEqual(int((vocab.encode(splits["valid"]) == vocab.unk_id).sum()), 0)
        self.assertGreater(int((train_vocab.encode(splits["valid"]) == 0).sum()), 200)
        again = Path(tempfile.mkdtemp(dir=self.get_temp_dir()))
        synthetic.write_synthetic_splits(again, 4, 20_000, 3000, 3000)
        for name in ("train.txt", "valid.txt", "test.txt", "vocab.txt"):
            self.assertEqual((again / name).read_bytes(), (directory / name).read_bytes())

    def test_invalid_size(self):
        with self.assertRaisesRegex(ValueError, r"num_tokens must be >= 1, got 0"):
            synthetic.generate_corpus(0, seed=0)


if __name__ == "__main__":
    tf.test.main()
