"""Hostile inputs (docs/hostile_inputs.md, "Corpus files"): Corpus files a user gives: unreadable,
missing, empty, huge lines. Each is refused with a message naming it, and nothing a user has is
touched (every pre-existing file byte-identical afterwards)."""

import gzip
import os
from pathlib import Path

import tensorflow as tf

from psmm_tf import configs
from psmm_tf.data import corpus, corpus_setup
from psmm_tf.data.vocabulary import Vocabulary
from psmm_tf.testing import snapshot, tiny_config
from psmm_tf.training import run_setup, train_lib


class CorpusSweepTest(tf.test.TestCase):
    def assert_text_corpus_refused(self, folder, workdir, message):
        """A run on the text corpus in `folder` is refused with `message` (a regex), creating
        no `workdir` and leaving `folder` byte-identical."""
        before = snapshot(folder)
        config = tiny_config().replace(data={"dataset": "text", "data_dir": str(folder)})
        with self.assertRaisesRegex(run_setup.RunRefusedError, message):
            train_lib.run(config, workdir, verbose=0)
        self.assertFalse(workdir.exists())
        self.assertEqual(snapshot(folder), before)

    def test_unreadable_corpus_files_are_refused_naming_them(self):
        root = Path(self.get_temp_dir())
        cases = {
            "not_gzip": ("train.txt.gz", b"plain text, not gzip\n" * 20,
                         r"train.txt.gz: not a readable gzip file after line 0"),
            "cut_gzip": ("train.txt.gz", gzip.compress(os.urandom(4000).hex().encode() + b"\n")
                         [:500], r"train.txt.gz: not a readable gzip file after line 0"),
            "latin1": ("train.txt", "the caf\xe9 sat\n".encode("latin-1") * 50,
                       r"train.txt: line 1 is not valid UTF-8 .*expected a UTF-8 text file"),
        }
        for name, (file_name, data, message) in cases.items():
            with self.subTest(case=name):
                folder = root / name
                folder.mkdir(exist_ok=True)
                (folder / file_name).write_bytes(data)
                (folder / "valid.txt").write_text("the cat sat\n" * 5)
                self.assert_text_corpus_refused(folder, root / f"run_{name}", message)

    def test_a_missing_or_empty_validation_file_is_refused_naming_it(self):
        root = Path(self.get_temp_dir())
        for name, valid, message in [
            ("no_valid", None, r"validation split \('valid' in .*no_valid\) has no file"),
            ("empty_valid", "", r"Corpus file .*empty_valid/valid.txt is empty"),
        ]:
            with self.subTest(case=name):
                folder = root / name
                folder.mkdir(exist_ok=True)
                (folder / "train.txt").write_text("the cat sat on the mat .\n" * 400)
                if valid is not None:
                    (folder / "valid.txt").write_text(valid)
                self.assert_text_corpus_refused(folder, root / f"run_{name}", message)

    def test_a_huge_single_line_is_read_as_one_stream(self):
        folder = Path(self.get_temp_dir()) / "one_huge_line"
        folder.mkdir(exist_ok=True)
        words = ["the", "cat", "sat", "on", "a", "mat"]
        (folder / "train.txt").write_text(" ".join(words[i % 6] for i in range(200_000)))
        (folder / "valid.txt").write_text("the cat sat\n")
        corpus = corpus_setup.load_corpus(configs.DataConfig(dataset="text",
                                                             data_dir=str(folder)))
        self.assertLen(corpus.ids["train"], 200_001)  # the words and one <eos>
        self.assertEqual(sorted(corpus.vocabulary.tokens), ["<eos>", "<unk>", *sorted(words)])

    def test_a_refused_start_leaves_no_generated_corpus_behind(self):
        workdir = Path(self.get_temp_dir()) / "refused_with_user_file"
        workdir.mkdir(exist_ok=True)
        (workdir / "notes.txt").write_text("mine\n")
        with self.assertRaisesRegex(run_setup.RunRefusedError, r"too few for batch_size=1000"):
            train_lib.run(tiny_config(batch_size=1000), workdir, verbose=0)
        self.assertEqual(snapshot(workdir), {"notes.txt": b"mine\n"})  # no synthetic_data/
        fresh = Path(self.get_temp_dir()) / "refused_fresh"
        with self.assertRaises(run_setup.RunRefusedError):
            train_lib.run(tiny_config(batch_size=1000), fresh, verbose=0)
        self.assertFalse(fresh.exists())


LINE = "the cat sat on the mat and the dog sat on the log .\n"


class EncodingSweepTest(tf.test.TestCase):
    """Text encodings. A corpus file that would be read as other words
    than its text is refused naming the file, the line and the fix; nothing is written."""

    def write(self, name, content):
        path = Path(self.get_temp_dir()) / name
        path.write_bytes(content)
        return path

    def test_encodings_that_would_change_the_words_are_refused_naming_the_file(self):
        body = LINE.encode() * 3
        for name, content, message in [
            ("nul.txt", body[:10] + b"\x00" + body[10:],
             r"nul.txt: line 1 holds a NUL character \(at character 10\): a binary file, or "
             r"UTF-16 text; expected a UTF-8 text file"),
            ("utf16le.txt", LINE.encode("utf-16-le") * 3, r"utf16le.txt: line 1 holds a NUL"),
            ("utf16.txt", (LINE * 3).encode("utf-16"),
             r"utf16.txt starts with a UTF-16 byte order mark: a UTF-16 text file; expected "
             r"UTF-8 \(convert it, e.g. iconv"),
            ("cr.txt", body.replace(b"\n", b"\r"),
             r"cr.txt: its lines end in a carriage return \(\\r\) alone \(classic Mac OS line "
             r"ends\), so the whole file would read as one line"),
            ("joined.txt", body + b"\xef\xbb\xbf" + body,
             r"joined.txt: line 4 holds a byte order mark \(U\+FEFF\) at character 0: files "
             r"joined with theirs"),
        ]:
            with self.subTest(name=name):
                path = self.write(name, content)
                with self.assertRaisesRegex(ValueError, message):
                    corpus.read_tokens(path)
                with self.assertRaisesRegex(ValueError, message):
                    corpus.read_token_ids(path, Vocabulary.build(LINE.split()))
                self.assertEqual(path.read_bytes(), content)

    def test_a_leading_byte_order_mark_and_crlf_line_ends_read_as_the_plain_text(self):
        expected = corpus.read_tokens(self.write("plain.txt", LINE.encode() * 3))
        self.assertEqual(len(expected), 3 * 15)
        for name, content in [("bom.txt", b"\xef\xbb\xbf" + LINE.encode() * 3),
                              ("crlf.txt", LINE.replace("\n", "\r\n").encode() * 3),
                              ("bom_crlf.txt",
                               b"\xef\xbb\xbf" + LINE.replace("\n", "\r\n").encode() * 3),
                              ("gz_bom.txt.gz",
                               gzip.compress(b"\xef\xbb\xbf" + LINE.encode() * 3))]:
            with self.subTest(name=name):
                self.assertEqual(corpus.read_tokens(self.write(name, content)), expected)
        # A \r inside a line of a file with \n line ends stays whitespace, as before.
        self.assertEqual(corpus.read_tokens(self.write("inner_cr.txt", b"a\rb\nc\n")),
                         ["a", "b", "<eos>", "c", "<eos>"])

    def test_words_in_two_unicode_normalisations_are_named_in_one_warning(self):
        data = Path(self.get_temp_dir()) / "mixed_normalisation"
        data.mkdir()
        text = ("caf\u00e9 " + LINE) * 20 + ("cafe\u0301 " + LINE) * 20
        for split in ("train", "valid", "test"):
            (data / f"{split}.txt").write_text(text, encoding="utf-8")
        before = snapshot(data)
        with self.assertLogs(level="WARNING") as logs:
            loaded = corpus_setup.load_corpus(configs.DataConfig(dataset="text",
                                                                 data_dir=str(data)))
        self.assertRegex("\n".join(logs.output),
                         r"1 word\(s\) of the corpus in .*mixed_normalisation are spelled in two "
                         r"Unicode normalisations \(e.g. 'cafe\\u0301' and its composed form "
                         r"'caf\\xe9'\)")
        self.assertIn("caf\u00e9", loaded.vocabulary)  # both kept: the text is read as it is
        self.assertIn("cafe\u0301", loaded.vocabulary)
        self.assertEqual(snapshot(data), before)

    def test_a_split_name_that_is_not_a_file_is_named(self):
        # Was "No 'train' file ... (found: ['test', 'valid'])" beside a train.txt folder.
        for name, make in [("folder", lambda path: path.mkdir()),
                           ("link that leads nowhere",
                            lambda path: path.symlink_to(path.parent / "missing.txt"))]:
            with self.subTest(name=name):
                data = Path(self.get_temp_dir()) / name.replace(" ", "_")
                data.mkdir()
                make(data / "train.txt")
                (data / "valid.txt").write_text(LINE)
                with self.assertRaisesRegex(ValueError, rf"{data}/train.txt is a {name}; "
                                                        rf"expected the train split's text file"):
                    corpus.find_split_files(data, "text")

    def test_a_vocabulary_size_below_three_is_refused_naming_it(self):
        for size in (1, 2):
            with self.subTest(size=size):
                with self.assertRaisesRegex(ValueError, rf"max_vocab_size must be >= 3 \(<unk>, "
                                                        rf"<eos> and at least one word\), got "
                                                        rf"{size}"):
                    configs.DataConfig(dataset="text", max_vocab_size=size)


class DegenerateCorpusTest(tf.test.TestCase):
    """Corpora that read, but whose run would learn or report nothing
    (exit 0 before): refused at the start, naming the split; no run file written."""

    def test_corpora_without_words_to_learn_or_to_validate_are_refused(self):
        root = Path(self.get_temp_dir())
        for name, train, valid, data, message in [
            ("blank_lines", "\n" * 2000, LINE * 5, {},
             r"The vocabulary holds no word besides <unk> and <eos> \(the training split 'train'"
             r" in .*blank_lines: 2000 tokens, min_count=1"),
            ("rare_words", LINE * 100, LINE * 5, {"min_count": 1000},
             r"The vocabulary holds no word besides <unk> and <eos> .*min_count=1000"),
            ("all_unk_valid", LINE * 100, "zebra yak quux\n" * 20, {},
             r"The validation split \('valid' in .*all_unk_valid\) holds no word of the "
             r"vocabulary: its 80 tokens are all <unk> or <eos>"),
            ("blank_valid", LINE * 100, "  \n\t\n", {},
             r"The validation split .* holds no word of the vocabulary: its 2 tokens"),
        ]:
            with self.subTest(name=name):
                folder = root / name
                folder.mkdir()
                for split, text in (("train", train), ("valid", valid), ("test", LINE * 5)):
                    (folder / f"{split}.txt").write_text(text)
                before = snapshot(folder)
                config = tiny_config(batch_size=2).replace(
                    data={"dataset": "text", "data_dir": str(folder), **data})
                workdir = root / f"{name}_run"
                with self.assertRaisesRegex(run_setup.RunRefusedError, message):
                    train_lib.run(config, workdir, verbose=0)
                self.assertFalse(workdir.exists())
                self.assertEqual(snapshot(folder), before)


if __name__ == "__main__":
    tf.test.main()
