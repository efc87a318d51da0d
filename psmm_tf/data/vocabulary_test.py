"""Tests of Vocabulary: id order, counts, encode/decode, the saved file and its errors."""

import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from psmm_tf import testing
from psmm_tf.data.vocabulary import Vocabulary, validate_ids

STREAM = "b a c a <eos> b a <unk> d <eos> c e".split()
# Counts: a 3, b 2, c 2, d 1, e 1, <unk> 1, <eos> 2.


class VocabularyTest(testing.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = Path(tempfile.mkdtemp(dir=self.get_temp_dir()))

    def test_build_orders_unk_eos_then_count_descending_ties_alphabetical(self):
        vocab = Vocabulary.build(STREAM)
        self.assertEqual(vocab.tokens, ("<unk>", "<eos>", "a", "b", "c", "d", "e"))
        self.assertEqual(vocab.counts.tolist(), [1, 2, 3, 2, 2, 1, 1])
        self.assertEqual((vocab.unk_id, vocab.eos_id, len(vocab)), (0, 1, 7))

    def test_min_count_and_max_size_move_counts_to_unk(self):
        vocab = Vocabulary.build(STREAM, min_count=2)
        self.assertEqual(vocab.tokens, ("<unk>", "<eos>", "a", "b", "c"))
        self.assertEqual(vocab.counts.tolist(), [3, 2, 3, 2, 2])  # <unk> 1 + d 1 + e 1
        vocab = Vocabulary.build(STREAM, max_size=4)
        self.assertEqual(vocab.tokens, ("<unk>", "<eos>", "a", "b"))
        self.assertEqual(vocab.counts.tolist(), [5, 2, 3, 2])
        self.assertEqual(int(vocab.counts.sum()), len(STREAM))

    def test_extra_tokens_appended_alphabetically(self):
        vocab = Vocabulary.build(STREAM, min_count=2, extra_tokens=["zz", "e", "a", "yy"])
        self.assertEqual(vocab.tokens, ("<unk>", "<eos>", "a", "b", "c", "e", "yy", "zz"))
        self.assertEqual(vocab.counts.tolist(), [2, 2, 3, 2, 2, 1, 0, 0])

    def test_encode_decode(self):
        vocab = Vocabulary.build(STREAM)
        ids = vocab.encode(["a", "zebra", "<eos>", "e"])
        self.assertEqual(ids.dtype, np.int32)
        self.assertEqual(ids.tolist(), [2, 0, 1, 6])
        self.assertEqual(vocab.decode(ids), ["a", "<unk>", "<eos>", "e"])
        self.assertEqual(vocab.encode([]).shape, (0,))
        self.assertEqual(vocab.token_to_id("c"), 4)
        self.assertIn("c", vocab)
        with self.assertRaisesRegex(ValueError, r"ids holds id 7, outside .*\[0, 7\)"):
            vocab.decode([1, 7])

    def test_save_load_round_trip(self):
        vocab = Vocabulary.build(STREAM + ["é", "日本"])
        path = self.dir / "vocab.txt"
        vocab.save(path)
        self.assertEqual(
            path.read_bytes(), "<unk>\n<eos>\na\nb\nc\nd\ne\né\n日本\n".encode("utf-8")
        )
        loaded = Vocabulary.load(path)
        self.assertEqual(loaded, vocab)
        self.assertIsNone(loaded.counts)
        self.assertEqual(loaded.encode(["日本", "b"]).tolist(), [8, 3])

    def test_load_keeps_file_order_and_finds_unk(self):
        path = self.dir / "v.txt"
        path.write_text("x\n<unk>\ny", encoding="utf-8")  # No final newline.
        vocab = Vocabulary.load(path)
        self.assertEqual((vocab.tokens, vocab.unk_id, vocab.eos_id), (("x", "<unk>", "y"), 1, None))

    def _load_error(self, data: bytes, error, regex):
        path = self.dir / "bad_vocab.txt"
        path.write_bytes(data)
        with self.assertRaisesRegex(error, regex):
            Vocabulary.load(path)

    def test_load_errors(self):
        self._load_error(
            b"<unk>\na\nb\na\n", ValueError, r"bad_vocab\.txt: line 4: duplicate .*'a'.*line 2"
        )
        self._load_error(b"<unk>\na\n\nb\n", ValueError, r"bad_vocab\.txt: line 3: empty token")
        self._load_error(b"a\nb\n", ValueError, r"bad_vocab\.txt: no <unk> line")
        self._load_error(b"<unk>\n\xfe\n", ValueError, r"bad_vocab\.txt: line 2 is not valid UTF-8")
        self._load_error(b"<unk>\na b\n", ValueError, r"line 2: token 'a b' contains whitespace")
        self._load_error(b"<unk>\r\na\n", ValueError, r"line 1: token .* contains whitespace")
        self._load_error(b"", ValueError, r"bad_vocab\.txt is empty")
        with self.assertRaisesRegex(FileNotFoundError, r"Vocabulary file not found: .*missing"):
            Vocabulary.load(self.dir / "missing.txt")
        with self.assertRaisesRegex(ValueError, r"Vocabulary file .* is not a regular file \(a "
                                                r"folder, FIFO or device\)"):
            Vocabulary.load(self.dir)  # was "not found"

    def test_constructor_and_build_errors(self):
        with self.assertRaisesRegex(ValueError, r"Duplicate vocabulary token 'a' at ids 1 and 2"):
            Vocabulary(["<unk>", "a", "a"])
        with self.assertRaisesRegex(ValueError, r"needs the <unk> token"):
            Vocabulary(["a"])
        with self.assertRaisesRegex(ValueError, r"min_count must be >= 1"):
            Vocabulary.build(STREAM, min_count=0)
        with self.assertRaisesRegex(ValueError, r"max_size must be >= 2"):
            Vocabulary.build(STREAM, max_size=1)

    def test_validate_ids(self):
        self.assertEqual(validate_ids([0, 4], 5).tolist(), [0, 4])
        with self.assertRaisesRegex(ValueError, r"targets holds id -1, outside .*\[0, 5\)"):
            validate_ids(np.array([[0, -1]]), 5, "targets")
        with self.assertRaisesRegex(ValueError, r"targets holds id 5"):
            validate_ids([5], 5, "targets")
        with self.assertRaisesRegex(ValueError, r"ids must be integer token ids, got dtype float"):
            validate_ids([0.5], 5)


if __name__ == "__main__":
    tf.test.main()
