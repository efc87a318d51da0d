"""TFDS builders for line-based language-modelling corpora: `ptb`, `wikitext2`, `wikitext103`,
`plain_text`.

Each example is one line of the corpus, `{"text": tfds.features.Text()}`, in corpus order
(`disable_shuffling=True`: a language model reads the lines as one stream, so TFDS must not
shuffle them). Splits are train / validation / test. The builders first look for a local copy
in `manual_dir` (plain or gzipped files, directly there or in the archive's folder, e.g.
`simple-examples/data/` or `wikitext-2/`) and build the splits found there, offline; without a
local copy they download the official archive through `dl_manager` (WikiText: the author's
mirror first, the original S3 address second; the archives' sizes and SHA-256 are in
`checksums.tsv` beside this module, where TFDS looks for them). `manual_dir` is only read.

Each prepared dataset records where its lines came from in its metadata (`metadata.json`):
`source_sha256` over the split files' names and bytes (or the archive's URL), so that
`psmm_tf.data.tfds_corpus` reuses a prepared dataset only for the same files.

Importing this module registers the builders with TFDS, so `tfds.builder("ptb")` finds them, and
`tfds build --imports=psmm_tf.data.tfds_builders ptb --manual_dir=<folder>` prepares one.
"""

from __future__ import annotations

import hashlib
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
    URLS: tuple = ()  # Official archive (and mirrors of it), tried in order; () for none.
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
            metadata=tfds.core.MetadataDict(),
        )

    @classmethod
    def expected_files(cls) -> str:
        """The file names and folders looked for in manual_dir, for error messages."""
        names = [n for s in corpus.SPLITS for n in corpus.split_file_names(cls.CORPUS_DATASET, s)]
        folders = [f"{d}/" if d else "./" for d in cls.SUBDIRS]
        return f"one of {', '.join(names)} in one of the folders {', '.join(folders)}"

    @classmethod
    def find_files(cls, root) -> dict:
        """Split name ("train", "valid", "test") -> file, from the first folder holding any."""
        for subdir in cls.SUBDIRS:
            directory = root / subdir if subdir else root
            if directory.is_dir():
                files = corpus.find_split_files(directory, cls.CORPUS_DATASET)
                if files:
                    return files
        return {}

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        try:
            manual_dir = dl_manager.manual_dir
        except (AssertionError, ValueError):  # Missing or empty: TFDS raises, we fall back.
            manual_dir = None
        files = self.find_files(manual_dir) if manual_dir is not None else {}
        if files:
            source = source_fingerprint(files)
        else:
            url, files = self._download(dl_manager)
            source = source_fingerprint(url=url)
        self.info.metadata["source_sha256"] = source
        return {_TFDS_SPLITS[s]: self._generate_examples(path) for s, path in files.items()}

    def _download(self, dl_manager: tfds.download.DownloadManager) -> tuple:
        where = f"No local copy of {self.name} in manual_dir ({self.expected_files()})"
        if not self.URLS:
            raise FileNotFoundError(f"{where}, and {self.name} has nothing to download.")
        failures = []
        for url in self.URLS:
            try:
                extracted = dl_manager.download_and_extract(url)
            except Exception as err:  # Offline, or a dead host: try the next, keep the cause.
                failures.append(f"{url}: {err}")
                continue
            files = self.find_files(extracted)
            if not files:
                raise FileNotFoundError(
                    f"The archive {url} extracted to {extracted} holds none of the expected "
                    f"files ({self.expected_files()})."
                )
            return url, files
        raise FileNotFoundError(
            f"{where}, and downloading failed ({'; '.join(failures)}). Download the archive "
            f"yourself and pass the folder holding its files as manual_dir (--data_dir)."
        )

    def _generate_examples(self, path):
        for index, line in enumerate(corpus.iter_lines(path)):
            yield index, {"text": line}


class Ptb(_LineCorpusBuilder):
    """Penn Treebank, Mikolov et al. (2010) preprocessing: 929k / 73k / 82k tokens."""

    name = "ptb"
    CORPUS_DATASET = "ptb"
    URLS = ("http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz",)
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
    # The S3 bucket answers 403 since 2024 (pytorch/text#2233); the author's mirror serves the
    # same archive (ooples/AiDotNet#1284). checksums.tsv pins both to the same SHA-256.
    URLS = (
        "https://wikitext.smerity.com/wikitext-2-v1.zip",
        "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
    )
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
    URLS = (
        "https://wikitext.smerity.com/wikitext-103-v1.zip",
        "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip",
    )
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


def source_fingerprint(files: Optional[dict] = None, url: Optional[str] = None) -> str:
    """SHA-256 naming the source of a prepared dataset: its split files' names and bytes, or a URL.

    Args:
        files: dict split name -> path (`find_files`), or None.
        url: str. The downloaded archive's address, where there are no local files.

    Returns:
        str. 64 hex digits; equal for byte-identical files under the same names.
    """
    digest = hashlib.sha256()
    if url is not None:
        digest.update(f"url:{url}\n".encode())
    for split, path in sorted((files or {}).items()):
        digest.update(f"{split}:{path.name}:".encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\n")
    return digest.hexdigest()


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
