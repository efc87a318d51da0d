"""TFDS builders for line-based language-modelling corpora: `ptb`, `wikitext2`, `wikitext103`,
`plain_text`.

Each example is one line of the corpus, `{"text": tfds.features.Text()}`, in corpus order
(`disable_shuffling=True`: a language model reads the lines as one stream, so TFDS must not
shuffle them). Splits are train / validation / test. The builders first look for a local copy
in `manual_dir` (plain or gzipped files, directly there or in the archive's folder, e.g.
`simple-examples/data/` or `wikitext-2/`) and build the splits found there, offline; without a
local copy they download the official archive through `dl_manager`.

Importing this module registers the builders with TFDS, so `tfds.builder("ptb")` finds them.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow_datasets as tfds

from psmm_tf.data import corpus
from psmm_tf.data.corpus import EOS_TOKEN

# Corpus split names (file names) -> TFDS split names.
_TFDS_SPLITS = {"train": "train", "valid": "validation", "test": "test"}

_PTB_CITATION = """@article{marcus1993building,
  title={Building a large annotated corpus of English: The Penn Treebank},
  author={Marcus, Mitchell P. and Marcinkiewicz, Mary Ann and Santorini, Beatrice},
  journal={Computational Linguistics}, volume={19}, number={2}, pages={313--330}, year={1993}}"""
_WIKITEXT_CITATION = """@article{merity2016pointer,
  title={Pointer Sentinel Mixture Models},
  author={Merity, Stephen and Xiong, Caiming and Bradbury, James and Socher, Richard},
  journal={arXiv preprint arXiv:1609.07843}, year={2016}}"""


class _LineCorpusBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Shared logic: one example per line, local copy in manual_dir or official download."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release: one example per line, corpus order kept."}

    # Set by subclasses.
    CORPUS_DATASET = ""  # The `psmm_tf.data.corpus` dataset key (file names of the splits).
    URL: Optional[str] = None  # Official archive; None if there is nothing to download.
    SUBDIRS = ("",)  # Folders (relative to manual_dir or the extracted archive) to search.
    DESCRIPTION = ""
    HOMEPAGE = ""
    CITATION = ""

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.DESCRIPTION,
            features=tfds.features.FeaturesDict({"text": tfds.features.Text()}),
            homepage=self.HOMEPAGE,
            citation=self.CITATION,
            disable_shuffling=True,
        )

    def _expected_files(self) -> str:
        names = [n for s in corpus.SPLITS for n in corpus.split_file_names(self.CORPUS_DATASET, s)]
        folders = [f"{d}/" if d else "./" for d in self.SUBDIRS]
        return f"one of {', '.join(names)} in one of the folders {', '.join(folders)}"

    def _find_files(self, root) -> dict:
        for subdir in self.SUBDIRS:
            directory = root / subdir if subdir else root
            if directory.is_dir():
                files = corpus.find_split_files(directory, self.CORPUS_DATASET)
                if files:
                    return files
        return {}

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        try:
            manual_dir = dl_manager.manual_dir
        except (AssertionError, ValueError):  # Missing or empty: TFDS raises, we fall back.
            manual_dir = None
        files = self._find_files(manual_dir) if manual_dir is not None else {}
        if not files:
            files = self._download(dl_manager)
        return {_TFDS_SPLITS[s]: self._generate_examples(path) for s, path in files.items()}

    def _download(self, dl_manager: tfds.download.DownloadManager) -> dict:
        where = f"No local copy of {self.name} in manual_dir ({self._expected_files()})"
        if self.URL is None:
            raise FileNotFoundError(f"{where}, and {self.name} has nothing to download.")
        try:
            extracted = dl_manager.download_and_extract(self.URL)
        except Exception as err:  # Offline machines: say what to put where, keep the cause.
            raise FileNotFoundError(f"{where}, and downloading {self.URL} failed: {err}") from err
        files = self._find_files(extracted)
        if not files:
            raise FileNotFoundError(
                f"The archive {self.URL} extracted to {extracted} holds none of the expected "
                f"files ({self._expected_files()})."
            )
        return files

    def _generate_examples(self, path):
        for index, line in enumerate(corpus.iter_lines(path)):
            yield index, {"text": line}


class Ptb(_LineCorpusBuilder):
    """Penn Treebank, Mikolov et al. (2010) preprocessing: 929k / 73k / 82k tokens."""

    name = "ptb"
    CORPUS_DATASET = "ptb"
    URL = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
    SUBDIRS = ("", "simple-examples/data", "data")
    DESCRIPTION = "Penn Treebank as preprocessed by Mikolov et al.: 10k words, one sentence/line."
    HOMEPAGE = "http://www.fit.vutbr.cz/~imikolov/rnnlm/"
    CITATION = _PTB_CITATION
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Optional. Put ptb.{train,valid,test}.txt (or .txt.gz) from simple-examples.tgz in "
        "manual_dir to build offline; otherwise the archive is downloaded."
    )


class Wikitext2(_LineCorpusBuilder):
    """WikiText-2 v1 (tokenised), Merity et al. (2016): 2.09M / 217k / 245k tokens."""

    name = "wikitext2"
    CORPUS_DATASET = "wikitext2"
    URL = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip"
    SUBDIRS = ("", "wikitext-2")
    DESCRIPTION = "WikiText-2 (v1, tokenised, <unk> for rare words), one line per example."
    HOMEPAGE = "https://www.salesforce.com/blog/the-wikitext-long-term-dependency-language-modeling-dataset/"
    CITATION = _WIKITEXT_CITATION
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Optional. Put wiki.{train,valid,test}.tokens (or .tokens.gz) from wikitext-2-v1.zip in "
        "manual_dir to build offline (only the splits present are built); otherwise the archive "
        "is downloaded."
    )


class Wikitext103(Wikitext2):
    """WikiText-103 v1 (tokenised), Merity et al. (2016): 103M / 217k / 245k tokens."""

    name = "wikitext103"
    CORPUS_DATASET = "wikitext103"
    URL = "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip"
    SUBDIRS = ("", "wikitext-103")
    DESCRIPTION = "WikiText-103 (v1, tokenised, <unk> for rare words), one line per example."
    MANUAL_DOWNLOAD_INSTRUCTIONS = Wikitext2.MANUAL_DOWNLOAD_INSTRUCTIONS.replace(
        "wikitext-2-v1.zip", "wikitext-103-v1.zip"
    )


class PlainText(_LineCorpusBuilder):
    """The user's own whitespace-tokenised text: train.txt, valid.txt, test.txt in manual_dir."""

    name = "plain_text"
    CORPUS_DATASET = "text"
    DESCRIPTION = "Whitespace-tokenised text from manual_dir, one line per example."
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Required. Put train.txt, valid.txt and/or test.txt (or .txt.gz) in manual_dir."
    )


BUILDERS = {cls.name: cls for cls in (Ptb, Wikitext2, Wikitext103, PlainText)}
"""dict[str, type]. Builder name -> builder class."""


def load_token_ids(
    builder_name: str,
    split: str,
    vocabulary,
    data_dir: Optional[str] = None,
    manual_dir: Optional[str] = None,
) -> np.ndarray:
    """Prepares a builder (offline if `manual_dir` holds the files) and encodes one split.

    Every example (line) contributes its whitespace-split words and one `<eos>`, as
    `corpus.read_tokens` does, so the counts match Table 1 of the paper.

    Args:
        builder_name: str. `"ptb"`, `"wikitext2"`, `"wikitext103"` or `"plain_text"`.
        split: str. `"train"`, `"validation"` (or `"valid"`) or `"test"`.
        vocabulary: `psmm_tf.data.Vocabulary`. Unknown words map to its `<unk>` id.
        data_dir: optional str. TFDS data directory (TFDS's default if None).
        manual_dir: optional str. Folder with a local copy of the corpus files.

    Returns:
        np.ndarray. int32 [num_tokens], the split's token ids in corpus order.

    Raises:
        ValueError: for an unknown builder or a split the prepared dataset lacks.
        FileNotFoundError: if there is neither a local copy nor a successful download.
    """
    if builder_name not in BUILDERS:
        raise ValueError(f"Unknown builder {builder_name!r}; expected one of {tuple(BUILDERS)}.")
    split = _TFDS_SPLITS.get(split, split)
    builder = BUILDERS[builder_name](data_dir=data_dir)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=manual_dir)
    )
    if split not in builder.info.splits:
        raise ValueError(
            f"{builder_name} has no split {split!r}; prepared splits: "
            f"{sorted(builder.info.splits)}."
        )
    texts = builder.as_dataset(split=split, shuffle_files=False).map(_text).batch(4096)
    chunks = []
    for batch in texts.as_numpy_iterator():
        tokens = []
        for line in batch:
            tokens.extend(line.decode("utf-8").split())
            tokens.append(EOS_TOKEN)
        chunks.append(vocabulary.encode(tokens))
    if not chunks:
        raise ValueError(f"Split {split!r} of {builder_name} is empty.")
    return np.concatenate(chunks)


def _text(example):
    return example["text"]
