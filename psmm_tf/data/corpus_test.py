"""Tests of the corpus readers: token counts, file formats and the errors on bad input."""

import gzip
import tempfile
from pathlib import Path

import tensorflow as tf

from psmm_tf import testing
from psmm_tf.data import corpus
from psmm_tf.data.vocabulary import Vocabulary

TEXT = "the cat sat\n\n  a  dog <unk> ran \nend\n"
# 3 + 1, blank line 0 + 1, 4 + 1, 1 + 1 tokens.
TOKENS = ["the", "cat", "sat", "<eos>", "<eos>", "a", "dog", "<unk>", "ran", "<eos>"] + [
    "end",
    "<eos>",
]


class CorpusTest(testing.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = Path(tempfile.mkdtemp(dir=self.get_temp_dir()))

    def _write(self, name, data: bytes):
        path = self.dir / name
        if name.endswith(".gz"):
            with gzip.open(path, "wb") as f:
                f.write(data)
        else:
            path.write_bytes(data)
        return path

    def test_read_tokens_appends_one_eos_per_line_blank_lines_included(self):
        for name in ("a.txt", "a.tokens", "a.txt.gz", "a.tokens.gz"):
            self.assertEqual(corpus.read_tokens(self._write(name, TEXT.encode())), TOKENS)

    def test_last_line_without_newline_and_crlf(self):
        path = self._write("b.txt", b"x y\r\nz")
        self.assertEqual(corpus.read_tokens(path), ["x", "y", "<eos>", "z", "<eos>"])
        self.assertEqual(list(corpus.iter_lines(path)), ["x y", "z"])
        self.assertEqual(list(corpus.iter_tokens(path)), ["x", "y", "<eos>", "z", "<eos>"])

    def test_read_token_ids_matches_encode(self):
        path = self._write("c.txt.gz", TEXT.encode())
        vocab = Vocabulary(["<unk>", "<eos>", "the", "dog"])
        ids = corpus.read_token_ids(path, vocab)
        self.assertEqual(ids.dtype, "int32")
        self.assertEqual(ids.tolist(), [2, 0, 0, 1, 1, 0, 3, 0, 0, 1, 0, 1])

    def test_load_splits_finds_each_dataset_layout(self):
        layouts = {
            "ptb": ("ptb.train.txt", "ptb.valid.txt.gz", "ptb.test.txt"),
            "wikitext2": ("wiki.train.tokens.gz", "wiki.valid.tokens", "wiki.test.tokens"),
            "wikitext103": ("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens.gz"),
            "text": ("train.txt", "valid.txt", "test.txt.gz"),
        }
        for dataset, names in layouts.items():
            self.dir = Path(tempfile.mkdtemp(dir=self.get_temp_dir()))
            for i, name in enumerate(names):
                self._write(name, f"w{i} x\n".encode())
            splits = corpus.load_splits(self.dir, dataset)
            self.assertEqual(
                splits,
                {
                    "train": ["w0", "x", "<eos>"],
                    "valid": ["w1", "x", "<eos>"],
                    "test": ["w2", "x", "<eos>"],
                },
            )

    def test_load_splits_returns_only_present_splits_plain_preferred_over_gz(self):
        self._write("wiki.test.tokens", b"plain\n")
        self._write("wiki.test.tokens.gz", b"gzipped\n")
        self.assertEqual(corpus.load_splits(self.dir, "wikitext2"), {"test": ["plain", "<eos>"]})

    def test_missing_file(self):
        with self.assertRaisesRegex(FileNotFoundError, r"Corpus file not found: .*nope\.txt"):
            corpus.read_tokens(self.dir / "nope.txt")

    def test_empty_corpus(self):
        for name in ("empty.txt", "empty.txt.gz"):
            with self.assertRaisesRegex(ValueError, rf"{name} is empty; expected at least one"):
                corpus.read_tokens(self._write(name, b""))
        self._write("train.txt", b"")
        with self.assertRaisesRegex(ValueError, r"train\.txt is empty"):
            corpus.load_splits(self.dir, "text")

    def test_directory_without_splits_names_expected_files(self):
        self._write("notes.txt", b"x\n")
        with self.assertRaisesRegex(
            FileNotFoundError, r"No ptb split files in .*ptb\.train\.txt, ptb\.train\.txt\.gz"
        ):
            corpus.load_splits(self.dir, "ptb")
        with self.assertRaisesRegex(FileNotFoundError, r"Corpus directory not found: .*absent"):
            corpus.load_splits(self.dir / "absent", "ptb")

    def test_unknown_dataset_and_split(self):
        with self.assertRaisesRegex(ValueError, r"Unknown dataset 'imdb'; expected one of"):
            corpus.load_splits(self.dir, "imdb")
        with self.assertRaisesRegex(ValueError, r"Unknown split 'dev'"):
            corpus.split_file_names("ptb", "dev")

    def test_invalid_utf8_names_file_and_line(self):
        data = "ok\nfine é\n".encode() + b"bad \xff byte\n"
        for name in ("bad.txt", "bad.txt.gz"):
            path = self._write(name, data)
            with self.assertRaisesRegex(ValueError, rf"{name}: line 3 is not valid UTF-8"):
                corpus.read_tokens(path)


if __name__ == "__main__":
    tf.test.main()
