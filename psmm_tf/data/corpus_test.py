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
        with self.assertRaisesRegex(FileNotFoundError, r"Corpus directory not found: .*absent; "
                                    r"expected the folder of the corpus files"):
            corpus.load_splits(self.dir / "absent", "ptb")
        self._write("a_file", b"x\n")
        with self.assertRaisesRegex(FileNotFoundError, r"Corpus directory .*a_file is not a "
                                    r"folder; expected the folder of the corpus files"):
            corpus.load_splits(self.dir / "a_file", "ptb")

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



class SyntheticCorpusTest(testing.TestCase):
    def config(self, train_tokens):
        from psmm_tf.configs import DataConfig

        return DataConfig(dataset="synthetic", synthetic_train_tokens=train_tokens)

    def test_a_corpus_of_other_settings_is_refused_and_kept(self):
        # A start killed after writing a 50k corpus, then run with 20k,
        # trained on the 50k corpus while its config said 20k.
        from psmm_tf.data import corpus_setup

        scratch = Path(self.get_temp_dir()) / "other_settings" / "synthetic_data"
        first = corpus_setup.load_corpus(self.config(3000), scratch_dir=scratch)
        files = {p.name: p.read_bytes() for p in scratch.iterdir()}
        self.assertIn("settings.json", files)
        with self.assertRaisesRegex(ValueError, r"synthetic_data holds a synthetic corpus "
                                                r"generated with .*3000.*, not .*2000"):
            corpus_setup.load_corpus(self.config(2000), scratch_dir=scratch)
        self.assertEqual({p.name: p.read_bytes() for p in scratch.iterdir()}, files)
        again = corpus_setup.load_corpus(self.config(3000), scratch_dir=scratch)
        self.assertAllEqual(again.ids["train"], first.ids["train"])

    def test_an_interrupted_write_leaves_nothing(self):
        from unittest import mock

        from psmm_tf.data import corpus_setup

        parent = Path(self.get_temp_dir()) / "interrupted"
        scratch = parent / "synthetic_data"
        original = corpus_setup.write_synthetic_splits

        def killed_after_writing(directory, **kwargs):
            original(directory, **kwargs)
            raise KeyboardInterrupt  # as a signal between the splits and the settings

        with mock.patch.object(corpus_setup, "write_synthetic_splits", killed_after_writing):
            with self.assertRaises(KeyboardInterrupt):
                corpus_setup.load_corpus(self.config(3000), scratch_dir=scratch)
        self.assertEqual(list(parent.iterdir()), [])
        # A folder left incomplete by an older version is named, not half-read.
        scratch.mkdir()
        (scratch / "train.txt").write_text("a b c\n")
        with self.assertRaisesRegex(ValueError, r"incomplete synthetic corpus \(no valid.txt, "
                                                r"test.txt, vocab.txt\): remove that folder"):
            corpus_setup.load_corpus(self.config(3000), scratch_dir=scratch)


if __name__ == "__main__":
    tf.test.main()
