"""From a `DataConfig` to a vocabulary and the token ids of each split."""

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from psmm_tf.data import synthetic, tfds_corpus
from psmm_tf.data.corpus import load_splits
from psmm_tf.data.spelling import spell_splits
from psmm_tf.data.synthetic import write_synthetic_splits
from psmm_tf.data.vocabulary import Vocabulary


@dataclasses.dataclass
class Corpus:
    """A vocabulary and the encoded splits of one corpus.

    Attributes:
        vocabulary: `psmm_tf.data.Vocabulary`.
        ids: dict role ("train", "valid", "test") -> int32 `(num_tokens,)`; a role whose file
            is missing is absent.
        train_counts: int64 `(vocab_size,)`. Count of each id in the training ids (the word
            frequencies of the paper's Figure 4 buckets).
        data_dir: Path. Where the corpus files are (the prepared TFDS dataset where a real
            corpus was downloaded, not read from a data_dir).
        spellings: dict role -> `psmm_tf.data.spelling.Spelling` (each token's characters, a
            word outside the vocabulary included), for models with character inputs; None
            unless `load_corpus` was given `max_word_length`.
    """

    vocabulary: Vocabulary
    ids: dict
    train_counts: np.ndarray
    data_dir: Path
    spellings: dict | None = None

    def spelling(self, role, start=None, stop=None):
        """The `Spelling` of `ids[role][start:stop]` for models with character inputs; None
        where the corpus was loaded without spellings (models with word inputs)."""
        return None if self.spellings is None else self.spellings[role][start:stop]


def synthetic_directory(data_config, scratch_dir):
    """Where the synthetic corpus of `data_config` lives: `scratch_dir` (the run's own folder).

    Raises:
        ValueError: `data_config.data_dir` is set: the generator writes its splits and would
            overwrite a user's files there, so it is refused.
    """
    if data_config.data_dir:
        raise ValueError(
            f"data_dir={data_config.data_dir} was given with dataset='synthetic', which is "
            "generated into the run's own workdir (synthetic_data/) and never written into a "
            "data folder; name the format of that folder's files (dataset ptb, wikitext2, "
            "wikitext103 or text) or leave data_dir out.")
    if scratch_dir is None:
        raise ValueError("The synthetic corpus needs a scratch_dir to live in.")
    return Path(scratch_dir)


# Beside the generated splits: the settings they were generated with.
SYNTHETIC_SETTINGS_FILE = "settings.json"
_SYNTHETIC_FILES = ("train.txt", "valid.txt", "test.txt", synthetic.VOCAB_FILE)


def ensure_synthetic_splits(directory, data_config):
    """Generates the synthetic corpus of `data_config` into `directory` unless it is there.

    The splits are written into a temporary folder beside `directory`, with the settings they
    were generated with, and renamed into place whole: a start killed while writing leaves
    none of them, and a folder generated with other settings is refused, not read.

    Raises:
        ValueError: `directory` holds a corpus of other settings, or an incomplete one (written
            by a version before this check, or another program), naming it.
    """
    directory = Path(directory)
    settings = {"synthetic_seed": data_config.synthetic_seed,
                "synthetic_train_tokens": data_config.synthetic_train_tokens}
    if directory.exists():
        marker = directory / SYNTHETIC_SETTINGS_FILE
        if marker.is_file():
            try:
                stored = json.loads(marker.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as err:
                raise ValueError(
                    f"{marker} is not the settings of a generated corpus ({type(err).__name__}: "
                    f"{err}): remove {directory} (it is generated; nothing else is in it) to "
                    f"generate it again.") from None
            if stored != settings:
                raise ValueError(
                    f"{directory} holds a synthetic corpus generated with {stored}, not "
                    f"{settings}: resume the run with its own settings, or remove that folder "
                    f"(it is generated; nothing else is in it) to generate a new one.")
            return
        missing = [name for name in _SYNTHETIC_FILES if not (directory / name).is_file()]
        if missing:
            raise ValueError(
                f"{directory} holds an incomplete synthetic corpus (no {', '.join(missing)}): "
                f"remove that folder (it is generated) and start again.")
        return  # generated before the settings were kept: complete, read as it is
    directory.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        write_synthetic_splits(temporary, seed=data_config.synthetic_seed,
                               train_tokens=data_config.synthetic_train_tokens)
        (temporary / SYNTHETIC_SETTINGS_FILE).write_text(json.dumps(settings), encoding="utf-8")
        os.rename(temporary, directory)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def load_corpus(data_config, scratch_dir=None, vocabulary=None, max_word_length=None):
    """Reads (or, for "synthetic", first writes into `scratch_dir`) a corpus; encodes its splits.

    The real corpora (ptb, wikitext2, wikitext103, text) go through their TFDS builders
    (`psmm_tf.data.tfds_corpus`): prepared once from `data_dir` into `tfds_data_dir`, then read
    from there; the files of `data_dir` are checked before anything is written.

    Args:
        data_config: `psmm_tf.configs.DataConfig`.
        scratch_dir: str or path. The run's own folder where the synthetic corpus is written
            (a `data_dir` with "synthetic" is refused: nothing is written into a data folder).
        vocabulary: optional `Vocabulary` (e.g. a run's saved `vocab.txt`); built otherwise:
            "synthetic" uses the generator's `vocab.txt` (training words plus held-out names),
            every other dataset `Vocabulary.build` over the training role's tokens with
            `min_count` and `max_vocab_size`.
        max_word_length: optional int. Also spell every token (`Corpus.spellings`) with this
            many characters per word, for a model with character inputs.

    Returns:
        A `Corpus`.

    Raises:
        ValueError: no `data_dir` for "text", a `data_dir` for "synthetic", an unreadable or
            empty file, or no file for the training role.
        FileNotFoundError: the directory or its files are missing (and, without a `data_dir`,
            the download failed).
    """
    dataset = data_config.dataset
    if dataset == "synthetic":
        directory = synthetic_directory(data_config, scratch_dir)
        ensure_synthetic_splits(directory, data_config)
        if vocabulary is None:
            vocabulary = Vocabulary.load(directory / synthetic.VOCAB_FILE)
        # Generated per run into its workdir: read directly, not prepared as a TFDS dataset.
        tokens = load_splits(directory, "text")
    else:
        # The TFDS builder of the dataset, prepared once from data_dir (its manual_dir).
        tokens, directory = tfds_corpus.load_data_config(data_config)
    roles = {"train": data_config.train_split, "valid": data_config.valid_split,
             "test": data_config.test_split}
    if roles["train"] not in tokens:
        raise ValueError(
            f"No {roles['train']!r} file for dataset {dataset!r} in {directory} (found: "
            f"{sorted(tokens)}); set train_split to a split that exists."
        )
    if vocabulary is None:
        vocabulary = Vocabulary.build(tokens[roles["train"]], min_count=data_config.min_count,
                                      max_size=data_config.max_vocab_size)
        _warn_of_mixed_normalisation(vocabulary, directory)
    present = {role: tokens[split] for role, split in roles.items() if split in tokens}
    encoded = {role: vocabulary.encode(split) for role, split in present.items()}
    spellings = (None if max_word_length is None
                 else spell_splits(present, vocabulary, max_word_length))
    counts = np.bincount(encoded["train"], minlength=len(vocabulary)).astype(np.int64)
    return Corpus(vocabulary=vocabulary, ids=encoded, train_counts=counts, data_dir=directory,
                  spellings=spellings)


def _warn_of_mixed_normalisation(vocabulary, directory):
    """Logs one warning when words of `vocabulary` are spelled in two Unicode normalisations
    (e.g. "café" composed, NFC, and decomposed, NFD): they are two words to the model, as they
    are to the serving signatures, which read text as it comes."""
    import unicodedata

    from absl import logging

    tokens = set(vocabulary.tokens)
    twins = sorted(t for t in tokens if not t.isascii()
                   and unicodedata.normalize("NFC", t) != t
                   and unicodedata.normalize("NFC", t) in tokens)
    if twins:
        logging.warning(
            "%d word(s) of the corpus in %s are spelled in two Unicode normalisations (e.g. "
            "%a and its composed form %a): the model learns them as different words. Normalise "
            "the files to NFC (e.g. uconv -x any-nfc) for one word each.", len(twins),
            directory, twins[0], unicodedata.normalize("NFC", twins[0]))
