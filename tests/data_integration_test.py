"""The data layer on the real corpora: Table 1 token counts, the PTB vocabulary, full coverage.

Reads the shared copies in `<repo>/../shared/data` (override with PSMM_SHARED_DATA); skipped
with a reason where they are absent.
"""

import os
import tempfile
import unittest
from pathlib import Path

import numpy as np

from psmm_tf.data import (
    Vocabulary,
    evaluation_steps,
    evaluation_windows,
    load_splits,
    read_token_ids,
    steps_per_epoch,
    training_windows,
)

SHARED_DATA = Path(
    os.environ.get("PSMM_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
)
PTB_DIR = SHARED_DATA / "ptb"
WIKITEXT2_DIR = SHARED_DATA / "wikitext-2"
SKIP_REASON = f"Shared corpora not found at {SHARED_DATA} (set PSMM_SHARED_DATA to their folder)."


@unittest.skipUnless(PTB_DIR.is_dir(), SKIP_REASON)
class PtbTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.splits = load_splits(PTB_DIR, "ptb")
        cls.vocab = Vocabulary.build(cls.splits["train"])

    def test_table1_token_counts(self):
        counts = {split: len(tokens) for split, tokens in self.splits.items()}
        self.assertEqual(counts, {"train": 929_589, "valid": 73_760, "test": 82_430})

    def test_vocabulary_has_10000_types_and_no_unknown_words_in_valid_test(self):
        self.assertEqual(len(self.vocab), 10_000)
        self.assertEqual(self.vocab.tokens[:3], ("<unk>", "<eos>", "the"))
        self.assertEqual(int(self.vocab.counts[self.vocab.eos_id]), 42_068)  # One per line.
        self.assertEqual(int(self.vocab.counts.sum()), 929_589)
        self.assertTrue(np.all(np.diff(self.vocab.counts[2:]) <= 0))  # Frequency-sorted.
        # PTB valid/test are closed-vocabulary: <unk> only where the text itself has <unk>.
        for split in ("valid", "test"):
            ids = self.vocab.encode(self.splits[split])
            self.assertEqual(int((ids == 0).sum()), self.splits[split].count("<unk>"))

    def test_vocabulary_file_round_trip(self):
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "ptb.vocab.txt"
            self.vocab.save(path)
            self.assertEqual(len(path.read_text(encoding="utf-8").split("\n")), 10_001)
            self.assertEqual(Vocabulary.load(path), self.vocab)

    def test_windows_over_ptb(self):
        ids = read_token_ids(PTB_DIR / "ptb.valid.txt.gz", self.vocab)
        self.assertEqual(len(ids), 73_760)
        weights = sum(
            float(w["target_weights"].numpy().sum())
            for w in evaluation_windows(ids, batch_size=1, length=100)
        )
        self.assertEqual(weights, 73_759.0)  # Every target once.
        self.assertEqual(evaluation_steps(73_760, 1, 100), 738)
        train_ids = self.vocab.encode(self.splits["train"])
        dataset = training_windows(train_ids, 32, 99, 1)
        self.assertEqual(int(dataset.cardinality()), steps_per_epoch(929_589, 32, 1))
        self.assertEqual(int(dataset.cardinality()), 29_049)
        first = next(iter(dataset))
        self.assertEqual(first["token_ids"].shape, (32, 100))
        self.assertEqual(int(first["token_mask"].numpy().sum()), 32)  # Only the current token.

    def test_tfds_builder_offline_matches_reader(self):
        from psmm_tf.data import load_token_ids

        with tempfile.TemporaryDirectory() as data_dir:
            ids = load_token_ids("ptb", "train", self.vocab, data_dir, str(PTB_DIR))
        np.testing.assert_array_equal(ids, self.vocab.encode(self.splits["train"]))


@unittest.skipUnless(WIKITEXT2_DIR.is_dir(), SKIP_REASON)
class WikiText2Test(unittest.TestCase):
    def test_table1_token_counts_valid_test_only(self):
        splits = load_splits(WIKITEXT2_DIR, "wikitext2")
        self.assertEqual(
            {s: len(t) for s, t in splits.items()}, {"valid": 217_646, "test": 245_569}
        )
        # README: vocabulary of the training side (valid) with count >= 1, the rest <unk>.
        vocab = Vocabulary.build(splits["valid"])
        unknown = vocab.encode(splits["test"]) == vocab.unk_id
        self.assertGreater(int(unknown.sum()), splits["test"].count("<unk>"))


if __name__ == "__main__":
    unittest.main()
