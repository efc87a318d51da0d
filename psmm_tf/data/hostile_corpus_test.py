"""Hostile inputs (issue 15, docs/hostile_inputs.md): Corpus files a user gives: unreadable,
missing, empty, huge lines. Each is refused with a message naming it, and nothing a user has
is touched (every pre-existing file byte-identical afterwards)."""

import gzip
import os
from pathlib import Path

import tensorflow as tf

from psmm_tf import configs
from psmm_tf import testing as psmm_testing  # its TrainedRunTestCase: no tests of its own
from psmm_tf.data import corpus_setup
from psmm_tf.testing import snapshot, tiny_config
from psmm_tf.training import run_setup, train_lib


class CorpusSweepTest(psmm_testing.TrainedRunTestCase):
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
                before = snapshot(folder)
                workdir = root / f"run_{name}"
                config = tiny_config().replace(data={"dataset": "text",
                                                     "data_dir": str(folder)})
                with self.assertRaisesRegex(run_setup.RunRefusedError, message):
                    train_lib.run(config, workdir, verbose=0)
                self.assertFalse(workdir.exists())
                self.assertEqual(snapshot(folder), before)

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
                before = snapshot(folder)
                workdir = root / f"run_{name}"
                config = tiny_config().replace(data={"dataset": "text",
                                                     "data_dir": str(folder)})
                with self.assertRaisesRegex(run_setup.RunRefusedError, message):
                    train_lib.run(config, workdir, verbose=0)
                self.assertFalse(workdir.exists())
                self.assertEqual(snapshot(folder), before)

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


if __name__ == "__main__":
    tf.test.main()
