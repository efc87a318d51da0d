"""Strings to the ids a language model scores, saved inside the model's `.keras` file."""

import os

import keras
import numpy as np

from psmm_tf.data.corpus import EOS_TOKEN, text_tokens
from psmm_tf.data.vocabulary import Vocabulary

_VOCABULARY_ASSET = "vocabulary.txt"


@keras.saving.register_keras_serializable(package="psmm_tf")
class LanguageModelPreprocessor(keras.layers.Layer):
    """Texts -> `token_ids`, `target_ids`, `padding_mask`, read as the training corpus is read.

    keras-hub's Preprocessor role for the package's tasks, built on `Vocabulary`. Each text is
    read as a corpus file (`psmm_tf.data.text_tokens`): each line's words followed by `<eos>`,
    a final newline ending the last line; unknown words become `<unk>`. The first token is
    predicted after an `<eos>` (the start of a line), so `token_ids = [<eos>, targets[:-1]]`:
    the same convention as the SavedModel's `score_text`. Pure Python and NumPy: it runs on any
    Keras backend. The vocabulary is saved as an asset of the `.keras` file.

    Args:
        vocabulary: a `psmm_tf.data.Vocabulary`, a sequence of tokens (id order), the path of a
            vocabulary file, or None (set by `load_assets` when a saved model is loaded).

    Call arguments:
        texts: a str or a sequence of str.

    Returns:
        A dict with `token_ids`, `target_ids` int32 `(batch_size, T)` and `padding_mask` bool
        `(batch_size, T)` (NumPy; `T` the longest text's token count, padding holds id 0), and
        `tokens`, a list of each text's tokens.

    Example:
    ```python
    preprocessor = LanguageModelPreprocessor(Vocabulary.load("run/vocab.txt"))
    model = PointerSentinelLM(backbone, window_size=100, preprocessor=preprocessor)
    model.score_text(["the cat sat on the mat"])["perplexity"]
    ```
    """

    def __init__(self, vocabulary=None, **kwargs):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        self.vocabulary = None
        if vocabulary is not None:
            self.set_vocabulary(vocabulary)
        self.built = True

    def set_vocabulary(self, vocabulary):
        """Sets the vocabulary from a `Vocabulary`, a sequence of tokens or a file path."""
        if isinstance(vocabulary, (str, os.PathLike)):
            vocabulary = Vocabulary.load(vocabulary)
        elif not isinstance(vocabulary, Vocabulary):
            vocabulary = Vocabulary(list(vocabulary))
        self.vocabulary = vocabulary

    def __call__(self, texts):
        # Python strings in, NumPy out: no backend tensors, so Keras' tensor handling is skipped.
        return self.call(texts)

    def call(self, texts):
        if self.vocabulary is None:
            raise ValueError("The preprocessor has no vocabulary: give one to its constructor "
                             "or set_vocabulary().")
        if isinstance(texts, str):
            texts = [texts]
        if isinstance(texts, (bytes, bytearray)):
            raise ValueError("`texts` is bytes: expected a str or a list of str (decode it, "
                             "e.g. texts.decode('utf-8')).")
        try:
            texts = list(texts)
        except TypeError:
            raise ValueError(f"`texts` must be a str or a list of str, got "
                             f"{type(texts).__name__}.") from None
        if not texts:
            raise ValueError("`texts` is empty: expected at least one text.")
        for i, text in enumerate(texts):
            if isinstance(text, (bytes, bytearray)):
                raise ValueError(f"`texts[{i}]` is bytes: expected a str (decode it, e.g. "
                                 f"text.decode('utf-8')).")
            if not isinstance(text, str):
                raise ValueError(f"`texts[{i}]` must be a str, got {type(text).__name__}.")
        tokens = [text_tokens(text) for text in texts]
        steps = max(len(t) for t in tokens)
        token_ids = np.zeros((len(texts), steps), np.int32)
        target_ids = np.zeros((len(texts), steps), np.int32)
        padding_mask = np.zeros((len(texts), steps), bool)
        start = self.vocabulary.token_to_id(EOS_TOKEN)
        for row, row_tokens in enumerate(tokens):
            ids = self.vocabulary.encode(row_tokens)
            target_ids[row, :len(ids)] = ids
            token_ids[row, :len(ids)] = np.concatenate([[start], ids[:-1]])
            padding_mask[row, :len(ids)] = True
        return {"token_ids": token_ids, "target_ids": target_ids, "padding_mask": padding_mask,
                "tokens": tokens}

    def save_assets(self, dir_path):
        if self.vocabulary is not None:
            self.vocabulary.save(os.path.join(dir_path, _VOCABULARY_ASSET))

    def load_assets(self, dir_path):
        path = os.path.join(dir_path, _VOCABULARY_ASSET)
        if os.path.exists(path):
            self.vocabulary = Vocabulary.load(path)

    def get_config(self):
        config = super().get_config()
        # The vocabulary travels as an asset of the .keras file, not in the JSON config.
        config["vocabulary"] = None
        return config
