"""Tests of the TFDS builders: offline builds from a local copy, corpus order, clear errors."""

import gzip
import os
import tempfile
from pathlib import Path

import tensorflow as tf

from psmm_tf import testing
from psmm_tf.data import corpus, tfds_builders
from psmm_tf.data.vocabulary import Vocabulary

# The shared reference corpora sit beside the checkout: <repo>/../shared/data.
SHARED_DATA = Path(
    os.environ.get("PSMM_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data")
)


class _FakeDownloadManager:
    """No manual_dir, and a download that fails as it does on an offline machine."""

    @property
    def manual_dir(self):
        raise AssertionError("Manual directory /nowhere does not exist or is empty.")

    def download_and_extract(self, url):
        raise OSError(f"Failed to resolve host of {url}")


class TfdsBuildersTest(testing.TestCase):
    def setUp(self):
        super().setUp()
        self.data_dir = tempfile.mkdtemp(dir=self.get_temp_dir())
        self.manual_dir = Path(tempfile.mkdtemp(dir=self.get_temp_dir()))

    def test_plain_text_keeps_line_order_and_blank_lines(self):
        # 30 lines, not in sorted order, blank lines included: TFDS must not reorder them.
        lines = [f"w{(7 * i) % 30} x" if i % 5 else "" for i in range(30)]
        (self.manual_dir / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        with gzip.open(self.manual_dir / "test.txt.gz", "wt", encoding="utf-8") as f:
            f.write("a b\n\nc\n")
        builder = tfds_builders.PlainText(data_dir=self.data_dir)
        builder.download_and_prepare(
            download_config=tfds_builders.tfds.download.DownloadConfig(
                manual_dir=str(self.manual_dir)
            )
        )
        self.assertEqual(sorted(builder.info.splits), ["test", "train"])
        self.assertEqual(str(builder.info.version), "1.0.0")
        texts = [
            ex["text"].decode() for ex in builder.as_dataset(split="train").as_numpy_iterator()
        ]
        self.assertEqual(texts, lines)
        vocab = Vocabulary.build(corpus.read_tokens(self.manual_dir / "train.txt"))
        ids = tfds_builders.load_token_ids(
            "plain_text", "train", vocab, self.data_dir, str(self.manual_dir)
        )
        self.assertAllEqual(ids, vocab.encode(corpus.read_tokens(self.manual_dir / "train.txt")))
        self.assertLen(ids, 30 + 24 * 2)  # One <eos> per line + 2 words on 24 non-blank lines.
        test_ids = tfds_builders.load_token_ids(
            "plain_text", "test", vocab, self.data_dir, str(self.manual_dir)
        )
        self.assertAllEqual(test_ids, [0, 0, 1, 1, 0, 1])  # a b <eos> <eos> c <eos>

    def test_wikitext2_builds_offline_from_shared_copy(self):
        if not (SHARED_DATA / "wikitext-2").is_dir():
            self.skipTest(f"Shared corpora not found at {SHARED_DATA} (set PSMM_SHARED_DATA).")
        manual_dir = str(SHARED_DATA / "wikitext-2")
        valid = corpus.read_tokens(SHARED_DATA / "wikitext-2" / "wiki.valid.tokens.gz")
        vocab = Vocabulary.build(valid)
        ids = tfds_builders.load_token_ids("wikitext2", "valid", vocab, self.data_dir, manual_dir)
        self.assertLen(ids, 217_646)
        self.assertAllEqual(ids, vocab.encode(valid))
        test_ids = tfds_builders.load_token_ids(
            "wikitext2", "test", vocab, self.data_dir, manual_dir
        )
        self.assertLen(test_ids, 245_569)
        # Only valid and test are in the shared copy: no train split, and a clear error for it.
        with self.assertRaisesRegex(
            ValueError, r"wikitext2 has no split 'train'; prepared splits: \['test', 'validation'\]"
        ):
            tfds_builders.load_token_ids("wikitext2", "train", vocab, self.data_dir, manual_dir)

    def test_files_found_in_archive_subfolder(self):
        data = self.manual_dir / "simple-examples" / "data"
        data.mkdir(parents=True)
        (data / "ptb.valid.txt").write_text(" a b \n c \n", encoding="utf-8")
        vocab = Vocabulary(["<unk>", "<eos>", "a", "b", "c"])
        ids = tfds_builders.load_token_ids(
            "ptb", "validation", vocab, self.data_dir, str(self.manual_dir)
        )
        self.assertAllEqual(ids, [2, 3, 1, 4, 1])

    def test_no_local_copy_and_failed_download_is_a_clear_error(self):
        builder = tfds_builders.Ptb(data_dir=self.data_dir)
        with self.assertRaisesRegex(
            FileNotFoundError,
            r"No local copy of ptb in manual_dir \(one of ptb\.train\.txt.*simple-examples/data/"
            r".*downloading failed \(http://www\.fit\.vutbr\.cz/~imikolov/rnnlm/"
            r"simple-examples\.tgz: Failed to resolve .*\)\. Download the archive yourself and "
            r"pass the folder",
        ):
            builder._split_generators(_FakeDownloadManager())

    def test_download_tries_the_mirror_then_the_original_address(self):
        extracted = self.manual_dir / "wikitext-2"
        extracted.mkdir()
        (extracted / "wiki.test.tokens").write_text(" = T = \n", encoding="utf-8")
        tried = []

        class MirrorDown(_FakeDownloadManager):
            def download_and_extract(self, url):
                tried.append(url)
                if "smerity" in url:
                    raise OSError("503 Service Unavailable")
                return extracted.parent

        builder = tfds_builders.Wikitext2(data_dir=self.data_dir)
        splits = builder._split_generators(MirrorDown())
        self.assertEqual(tried, list(tfds_builders.Wikitext2.URLS))
        self.assertEqual(sorted(splits), ["test"])
        self.assertEqual(list(splits["test"]), [(0, {"text": " = T = "})])
        self.assertEqual(
            builder.info.metadata["source_sha256"],
            tfds_builders.source_fingerprint(url=tfds_builders.Wikitext2.URLS[1]),
        )

    def test_checksums_of_the_official_archives(self):
        # checksums.tsv beside the builders, as TFDS reads it: size and SHA-256 per archive.
        for builder, size, sha256 in [
            (tfds_builders.Wikitext2, 4_475_746, "92675f1d63015c1c8b51f1656a52d5bd"),
            (tfds_builders.Wikitext103, 190_229_076, "242ba0f20b329cfdf1ccc61e9e9e5b59"),
        ]:
            infos = builder.url_infos
            for url in builder.URLS:
                self.assertEqual(int(infos[url].size), size, url)
                self.assertTrue(infos[url].checksum.startswith(sha256), url)
        self.assertNotIn(tfds_builders.Ptb.URLS[0], tfds_builders.Ptb.url_infos)  # Unpublished.

    def test_plain_text_without_files(self):
        (self.manual_dir / "readme.md").write_text("nothing here", encoding="utf-8")
        with self.assertRaisesRegex(
            FileNotFoundError, r"No local copy of plain_text .*train\.txt.*nothing to download"
        ):
            tfds_builders.load_token_ids(
                "plain_text", "train", None, self.data_dir, str(self.manual_dir)
            )

    def test_unknown_builder(self):
        with self.assertRaisesRegex(ValueError, r"Unknown builder 'lm1b'; expected one of"):
            tfds_builders.load_token_ids("lm1b", "train", None, self.data_dir)

    def test_registered_with_tfds(self):
        for name in ("ptb", "wikitext2", "wikitext103", "plain_text"):
            builder = tfds_builders.tfds.builder(name, data_dir=self.data_dir)
            self.assertIsInstance(builder, tfds_builders.BUILDERS[name])


if __name__ == "__main__":
    tf.test.main()
