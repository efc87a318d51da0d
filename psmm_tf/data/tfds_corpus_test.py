"""Tests of the TFDS data path: the same tokens as the direct reader, prepared once, the user's
folder only read, bad folders refused before anything is written."""

import gzip
import os
import tempfile
from pathlib import Path
from unittest import mock

import tensorflow as tf

from psmm_tf import configs, testing
from psmm_tf.data import corpus, tfds_builders, tfds_corpus

# The shared reference corpora sit beside the checkout: <repo>/../shared/data.
SHARED_DATA = Path(
    os.environ.get("PSMM_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data")
)
# Blank lines, a WikiText heading, runs of spaces, tabs, CRLF, non-ASCII words, no final newline.
TRAIN = (" = Heading = \n\nthe  cat\tsat \r\n\n = = Sub = = \ncafé über naïve\n a b c d e\nlast")
VALID = "one\n\n two three \n"


def snapshot(directory):
    """{relative path: (bytes, mtime_ns)} of every file under `directory`."""
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(Path(directory).rglob("*")) if p.is_file()}


class TfdsCorpusTest(testing.TestCase):
    def setUp(self):
        super().setUp()
        root = Path(tempfile.mkdtemp(dir=self.get_temp_dir()))
        self.tfds_dir = root / "tfds"
        self.data = root / "user_text"
        self.data.mkdir()
        with gzip.open(self.data / "train.txt.gz", "wt", encoding="utf-8", newline="") as f:
            f.write(TRAIN)
        (self.data / "valid.txt").write_bytes(VALID.encode())
        (self.data / "notes.md").write_text("the user's own file\n")

    def load(self, dataset="text", data_dir=None):
        return tfds_corpus.load_splits(dataset, data_dir or self.data, str(self.tfds_dir))

    def test_tokens_equal_the_direct_reader(self):
        tokens = self.load()
        self.assertEqual(tokens, corpus.load_splits(self.data, "text"))
        self.assertEqual(tokens["valid"], ["one", "<eos>", "<eos>", "two", "three", "<eos>"])
        self.assertEqual(tokens["train"][:9], ["=", "Heading", "=", "<eos>", "<eos>", "the", "cat",
                                               "sat", "<eos>"])
        self.assertTrue((self.tfds_dir / "plain_text" / "1.0.0").is_dir())

    def test_direct_record_reading_equals_tfds_as_dataset(self):
        self.load()
        builder = tfds_corpus.prepared_builder("text", self.data, str(self.tfds_dir))
        direct = tfds_corpus.read_split(builder, "train")
        with mock.patch.object(tfds_corpus, "_tfrecord_shards", return_value=False):
            through_tfds = tfds_corpus.read_split(builder, "train")
        self.assertEqual(direct, through_tfds)
        self.assertEqual(direct, corpus.load_splits(self.data, "text")["train"])

    def test_prepared_once_then_read_back(self):
        before = snapshot(self.data)
        first = self.load()
        prepared = snapshot(self.tfds_dir)
        self.assertTrue(any(name.endswith("dataset_info.json") for name in prepared))
        with mock.patch.object(tfds_builders.PlainText, "download_and_prepare",
                               side_effect=AssertionError("prepared twice")):
            self.assertEqual(self.load(), first)
        self.assertEqual(snapshot(self.tfds_dir), prepared)  # Not one file rewritten.
        self.assertEqual(snapshot(self.data), before)  # The user's folder is only read.

    def test_a_dataset_prepared_meanwhile_by_another_process_is_read(self):
        prepare = tfds_builders.PlainText.download_and_prepare

        def prepared_by_another_worker_first(builder, **kwargs):
            prepare(builder, **kwargs)
            raise OSError(f"[Errno 39] Directory not empty: {builder.data_path}")

        with mock.patch.object(tfds_builders.PlainText, "download_and_prepare",
                               prepared_by_another_worker_first):
            self.assertEqual(self.load(), corpus.load_splits(self.data, "text"))
        with mock.patch.object(tfds_builders.PlainText, "download_and_prepare",
                               side_effect=OSError("disk full")):
            with self.assertRaisesRegex(OSError, "disk full"):  # Nothing prepared there.
                tfds_corpus.load_splits("text", self.data, str(self.tfds_dir / "other"))

    def test_other_files_are_prepared_beside_never_read_stale(self):
        first = self.load()
        other = self.data.parent / "other_text"
        other.mkdir()
        (other / "train.txt").write_text("x y\nz\n")
        self.assertEqual(self.load(data_dir=other), {"train": ["x", "y", "<eos>", "z", "<eos>"]})
        self.assertLen(list((self.tfds_dir / tfds_corpus.SOURCES_DIR).iterdir()), 1)
        self.assertEqual(self.load(), first)  # The first folder still reads its own dataset.
        (other / "train.txt").write_text("x y\nw\n")  # Same name, new text: prepared anew.
        self.assertEqual(self.load(data_dir=other)["train"], ["x", "y", "<eos>", "w", "<eos>"])

    def test_damaged_shards_are_refused_naming_the_prepared_folder(self):
        # A deleted or cut shard gave NotFoundError / DataLossError, and an emptied
        # one read as a shorter split without any error.
        first = self.load()
        prepared = self.tfds_dir / "plain_text" / "1.0.0"
        (shard,) = prepared.glob("*train.tfrecord*")
        data = shard.read_bytes()
        for damage, message in [
            (lambda: shard.unlink(), r"NotFoundError"),
            (lambda: shard.write_bytes(data[:len(data) - 5]), r"DataLossError"),
            (lambda: shard.write_bytes(data[:8] + bytes([data[8] ^ 1]) + data[9:]),
             r"DataLossError"),
            (lambda: shard.write_bytes(b""), r"0 lines read, its info records 8"),
        ]:
            with self.subTest(message=message):
                damage()
                before = snapshot(self.tfds_dir)
                with self.assertRaisesRegex(
                        ValueError, rf"The prepared dataset .*plain_text/1.0.0 is damaged "
                                    rf"\('train' split: {message}.*Remove that folder"):
                    self.load()
                self.assertEqual(snapshot(self.tfds_dir), before)
                shard.write_bytes(data)
        self.assertEqual(self.load(), first)

    def test_layout_mismatch_is_refused_before_anything_is_written(self):
        before = snapshot(self.data)
        with self.assertRaisesRegex(
            FileNotFoundError,
            r"No ptb split files in .*user_text; expected one of ptb\.train\.txt, "
            r"ptb\.train\.txt\.gz, .* in one of the folders \./, simple-examples/data/",
        ):
            self.load("ptb")
        with self.assertRaisesRegex(FileNotFoundError, r"No wikitext2 split files .*wiki\.train"):
            self.load("wikitext2")
        with self.assertRaisesRegex(FileNotFoundError, r"Corpus directory not found: .*absent"):
            self.load(data_dir=self.data / "absent")
        with self.assertRaisesRegex(ValueError, r"Unknown dataset 'lm1b'"):
            self.load("lm1b")
        self.assertFalse(self.tfds_dir.exists())
        self.assertEqual(snapshot(self.data), before)

    def test_unreadable_or_empty_files_are_refused_before_anything_is_written(self):
        for name, content, message in [
            ("bad_utf8", b"fine\nfine\ncaf\xe9\n", r"train\.txt: line 3 is not valid UTF-8"),
            ("empty", b"", r"Corpus file .*empty/train\.txt is empty"),
        ]:
            with self.subTest(name):
                folder = self.data.parent / name
                folder.mkdir()
                (folder / "train.txt").write_bytes(content)
                with self.assertRaisesRegex(ValueError, message):
                    self.load(data_dir=folder)
                self.assertFalse(self.tfds_dir.exists())

    def test_missing_training_file_is_refused_before_anything_is_written(self):
        (self.data / "train.txt.gz").unlink()
        config = configs.DataConfig(dataset="text", data_dir=str(self.data),
                                    tfds_data_dir=str(self.tfds_dir))
        with self.assertRaisesRegex(ValueError, r"No 'train' file for dataset 'text' in "
                                                r".*user_text \(found: \['valid'\]\)"):
            tfds_corpus.load_data_config(config)
        self.assertFalse(self.tfds_dir.exists())
        tokens, directory = tfds_corpus.load_data_config(
            configs.DataConfig(dataset="text", data_dir=str(self.data), train_split="valid",
                               tfds_data_dir=str(self.tfds_dir)))
        self.assertEqual(directory, self.data)
        self.assertEqual(sorted(tokens), ["valid"])

    def test_a_tfds_data_dir_that_cannot_hold_a_dataset_is_refused_naming_it(self):
        a_file = self.tfds_dir.parent / "a_file"
        a_file.write_text("not a folder\n")
        before = snapshot(self.data)
        for tfds_data_dir in (a_file, a_file / "below"):
            with self.subTest(tfds_data_dir=tfds_data_dir):
                with self.assertRaisesRegex(NotADirectoryError, rf"tfds_data_dir={tfds_data_dir}: "
                                            rf".*a_file is not a folder; expected a folder for "
                                            rf"the prepared TFDS datasets"):
                    tfds_corpus.load_splits("text", self.data, str(tfds_data_dir))
        self.assertEqual(a_file.read_text(), "not a folder\n")
        self.assertEqual(snapshot(self.data), before)
        if os.geteuid() != 0:  # root writes into any folder
            read_only = self.tfds_dir.parent / "read_only"
            read_only.mkdir()
            read_only.chmod(0o555)
            self.addCleanup(read_only.chmod, 0o755)
            with self.assertRaisesRegex(PermissionError, r"tfds_data_dir=.*read_only/tfds: "
                                                         r".*read_only is not writable"):
                tfds_corpus.load_splits("text", self.data, str(read_only / "tfds"))
        # A missing folder below a writable one is made, as TFDS makes it.
        self.assertIn("train", tfds_corpus.load_splits("text", self.data,
                                                       str(self.tfds_dir / "new" / "deeper")))

    def test_a_tfds_data_dir_in_the_corpus_folder_is_refused_writing_nothing(self):
        # --data_dir is only read: TFDS prepared the dataset into <data_dir>/<tfds>/ (exit 0).
        before = snapshot(self.data)
        link = self.data.parent / "link_into_corpus"
        link.symlink_to(self.data / "sub")
        for tfds_data_dir, where in [(self.data, "is"), (self.data / "tfds", "is inside"),
                                     (self.data / "a" / "b", "is inside"), (link, "is inside")]:
            with self.subTest(tfds_data_dir=tfds_data_dir):
                message = (rf"tfds_data_dir={tfds_data_dir} \(--tfds_data_dir\) {where} "
                           rf"data_dir={self.data} \(--data_dir\): the prepared TFDS dataset "
                           rf"would be written into the corpus folder, which is only read")
                with self.assertRaisesRegex(ValueError, message):
                    tfds_corpus.load_splits("text", self.data, str(tfds_data_dir))
                with self.assertRaisesRegex(ValueError, message):
                    tfds_corpus.load_data_config(configs.DataConfig(
                        dataset="text", data_dir=str(self.data),
                        tfds_data_dir=str(tfds_data_dir)))
                with self.assertRaisesRegex(ValueError, message):
                    tfds_corpus.check_tfds_data_dir(str(tfds_data_dir), self.data)
                self.assertEqual(snapshot(self.data), before)
        # Beside the corpus folder (a sibling whose name starts alike) is fine.
        beside = self.data.parent / (self.data.name + "_tfds")
        tfds_corpus.check_tfds_data_dir_apart(str(beside), self.data)
        self.assertIn("train", tfds_corpus.load_splits("text", self.data, str(beside)))
        self.assertEqual(snapshot(self.data), before)

    def test_text_without_data_dir(self):
        with self.assertRaisesRegex(ValueError, r"dataset='text' needs data_dir"):
            tfds_corpus.load_splits("text", None, str(self.tfds_dir))

    def test_shared_ptb_and_wikitext2_equal_the_direct_reader(self):
        for dataset, folder, counts in [
            ("ptb", "ptb", {"train": 929_589, "valid": 73_760, "test": 82_430}),
            ("wikitext2", "wikitext-2", {"valid": 217_646, "test": 245_569}),
        ]:
            with self.subTest(dataset):
                data_dir = SHARED_DATA / folder
                if not data_dir.is_dir():
                    self.skipTest(f"Shared corpora not found at {SHARED_DATA} "
                                  "(set PSMM_SHARED_DATA).")
                tokens = self.load(dataset, data_dir)
                self.assertEqual({s: len(t) for s, t in tokens.items()}, counts)
                self.assertEqual(tokens, corpus.load_splits(data_dir, dataset))


if __name__ == "__main__":
    tf.test.main()
