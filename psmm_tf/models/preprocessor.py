"""Strings to the ids a language model trains on and scores, saved inside the model's file."""

import keras
import keras_hub
import numpy as np
from keras_hub.src.utils.tensor_utils import preprocessing_function

from psmm_tf.data.corpus import EOS_TOKEN, UNK_TOKEN, text_tokens
from psmm_tf.data.spelling import word_characters
from psmm_tf.models.backbone import LSTMBackbone
from psmm_tf.models.tokenizer import (
    WordTokenizer,
    require_tensorflow,
    tf,  # None on a host with JAX alone
    vocabulary_in_assets,
)
from psmm_tf.models.tokenizer import text_tokens as graph_text_tokens  # TF's, for prompts


@keras.saving.register_keras_serializable(package="psmm_tf")
class LanguageModelPreprocessor(keras_hub.models.CausalLMPreprocessor):
    """Texts -> `({"token_ids", "padding_mask"}, target_ids, sample_weight)`, as keras-hub's.

    keras-hub's `CausalLMPreprocessor` for the package's word-level tasks, over a
    `WordTokenizer`: a text is read as a corpus file (each line's words followed by `<eos>`),
    `<eos>` is put in front (the first word is predicted after it, as after a previous line)
    and the ids are padded or truncated to `sequence_length + 1`; `token_ids` are all but the
    last, the targets all but the first. TensorFlow string ops: it maps over a `tf.data`
    dataset (`ds.map(preprocessor)`) and runs on every Keras backend. Inputs that are already
    ids (an int array, or a dict holding `token_ids`) pass through unchanged, so `fit` and
    `predict` take ids or strings alike. The vocabulary is its tokenizer's (an asset of the
    `.keras` file).

    Args:
        tokenizer: a `WordTokenizer`; or None with `vocabulary` given.
        vocabulary: a `psmm_tf.data.Vocabulary`, a sequence of tokens or a vocabulary file
            path: builds the `WordTokenizer` (the form `LanguageModelPreprocessor(vocabulary)`).
        sequence_length: int. Targets per text in `fit` (the padded length).

    Call arguments:
        x: a str, a list of str or a string tensor; or ids, passed through.
        y, sample_weight: passed through with ids. With strings `y` must be None and
            `sample_weight` is None or one weight per text `(batch_size,)`, multiplying
            that text's padding mask.
        sequence_length: optional int, overriding the layer's.

    Returns:
        `(x, y, sample_weight)` packed as Keras does: `x = {"token_ids", "padding_mask"}`
        `(batch_size, sequence_length)`, `y` the target ids and `sample_weight` the padding mask
        as float.

    Example:
    ```python
    import tensorflow as tf
    from psmm_tf.data import Vocabulary
    from psmm_tf.models import LanguageModelPreprocessor

    vocabulary = Vocabulary.build("the cat sat on the mat <eos>".split())
    preprocessor = LanguageModelPreprocessor(vocabulary=vocabulary, sequence_length=16)
    x, y, weight = preprocessor(["the cat sat on the mat"])
    texts = ["the cat sat", "on the mat"]
    ds = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(preprocessor)
    ```
    """

    # keras-hub's loaders pick the preprocessor of a preset by its backbone's class.
    backbone_cls = LSTMBackbone
    tokenizer_cls = WordTokenizer

    def __init__(self, tokenizer=None, sequence_length=128, vocabulary=None, **kwargs):
        require_tensorflow("LanguageModelPreprocessor")
        kwargs.setdefault("trainable", False)
        kwargs.pop("add_start_token", None)
        kwargs.pop("add_end_token", None)
        if tokenizer is not None and not isinstance(tokenizer, (WordTokenizer, dict)):
            if vocabulary is not None:
                raise ValueError("Give a tokenizer or a vocabulary, not both.")
            tokenizer, vocabulary = None, tokenizer  # LanguageModelPreprocessor(vocabulary)
        if tokenizer is None:
            tokenizer = WordTokenizer(vocabulary)
        elif vocabulary is not None:
            raise ValueError("Give a tokenizer or a vocabulary, not both.")
        if not isinstance(tokenizer, WordTokenizer):
            raise TypeError(f"tokenizer must be a WordTokenizer, got {type(tokenizer).__name__}.")
        super().__init__(tokenizer=tokenizer, sequence_length=sequence_length,
                         add_start_token=True, add_end_token=False, **kwargs)

    @property
    def vocabulary(self):
        """The tokenizer's `psmm_tf.data.Vocabulary` (None before one is set)."""
        return self.tokenizer.vocabulary

    def set_vocabulary(self, vocabulary):
        """Sets the tokenizer's vocabulary from a `Vocabulary`, a sequence of tokens or a file."""
        self.tokenizer.set_vocabulary(vocabulary)

    def build(self, input_shape=None):
        # The packer (start token, padding) needs the vocabulary's ids.
        self.packer = keras_hub.layers.StartEndPacker(
            start_value=self.tokenizer.start_token_id, pad_value=0,
            sequence_length=self.sequence_length, return_padding_mask=True)
        self.built = True

    def call(self, x, y=None, sample_weight=None, sequence_length=None):
        if _holds_ids(x):
            return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
        if y is not None:
            raise ValueError("Texts carry their own targets: give y only with token ids.")
        self.tokenizer._check_vocabulary()
        return self._pack_texts(x, y=None, sample_weight=sample_weight,
                                sequence_length=sequence_length)

    @preprocessing_function
    def _pack_texts(self, x, y=None, sample_weight=None, sequence_length=None):
        del y  # refused with texts (`call`)
        if not self.built:
            self.build(None)
        length = (sequence_length or self.sequence_length) + 1
        token_ids, padding_mask = self.packer(self.tokenizer(x), sequence_length=length,
                                              add_start_value=True, add_end_value=False)
        inputs = {"token_ids": token_ids[..., :-1], "padding_mask": padding_mask[..., :-1]}
        weights = tf.cast(padding_mask[..., 1:], tf.float32)
        if sample_weight is not None:  # one weight per text
            per_text = tf.cast(sample_weight, tf.float32)
            tf.debugging.assert_rank(per_text, 1, message="`sample_weight` with texts must "
                                     "hold one weight per text, shape (batch_size,).")
            weights = weights * per_text[:, None]
        return keras.utils.pack_x_y_sample_weight(inputs, token_ids[..., 1:], weights)

    def generate_preprocess(self, x, sequence_length=None):
        """Prompts -> `{"token_ids", "padding_mask"}` `(batch_size, sequence_length)`: `<eos>`
        and each prompt's words, its last line unfinished (no `<eos>`), then padding."""
        self.tokenizer._check_vocabulary()
        return self._pack_prompts(x, sequence_length=sequence_length)

    @preprocessing_function
    def _pack_prompts(self, x, sequence_length=None):
        if not self.built:
            self.build(None)
        token_ids, padding_mask = self.packer(
            self.tokenizer.tokenize(x, finish_last_line=False),
            sequence_length=sequence_length or self.sequence_length,
            add_start_value=True, add_end_value=False)
        return {"token_ids": token_ids, "padding_mask": padding_mask}

    def open_vocabulary_prompts(self, texts, sequence_length=None):
        """Prompts -> `generate_preprocess`'s inputs, their words outside the vocabulary kept.

        Such a word's positions hold the id `V + j`, `j` its place in its row's list of such
        words (first occurrence first): `generate` reads it as `<unk>` and its pointer can copy
        it; `generate_postprocess(..., unknown_words)` spells it back.

        Args:
            texts: a list of str.
            sequence_length: optional int, overriding the layer's.

        Returns:
            `(inputs, unknown_words)`: `{"token_ids" int32, "padding_mask" bool}` NumPy
            `(batch_size, sequence_length)`, and each row's list of words outside the
            vocabulary.
        """
        inputs = self.generate_preprocess(texts, sequence_length=sequence_length)
        token_ids = np.array(keras.ops.convert_to_numpy(inputs["token_ids"]), np.int32)
        vocabulary = self.vocabulary
        unknown_words = []
        rows = graph_text_tokens(tf.constant(texts), finish_last_line=False).to_list()
        for row, words in enumerate(rows):
            found = {}
            # Position 0 is the leading `<eos>`; words past the length were cut.
            for position, word in enumerate(words[:token_ids.shape[1] - 1], start=1):
                word = word.decode("utf-8")
                if word not in vocabulary:  # `<unk>` itself is in it
                    token_ids[row, position] = len(vocabulary) + found.setdefault(word,
                                                                                  len(found))
            unknown_words.append(list(found))
        padding_mask = np.array(keras.ops.convert_to_numpy(inputs["padding_mask"]), bool)
        return {"token_ids": token_ids, "padding_mask": padding_mask}, unknown_words

    def generate_postprocess(self, x, unknown_words=None, prompt_included=True):
        """`generate`'s ids -> texts: the words after the leading `<eos>` (with
        `prompt_included`), up to the first generated `<eos>` that ended generation
        (dropped), lines joined with line breaks. An id `V + j` is word `j` of its row's
        `unknown_words` (`open_vocabulary_prompts`), `<unk>` without one. One unbatched row
        (`generate_preprocess` of one string: `(T,)` arrays, `unknown_words` that row's list)
        gives one string, as keras-hub's preprocessors do."""
        self.tokenizer._check_vocabulary()
        token_ids = np.asarray(keras.ops.convert_to_numpy(x["token_ids"]))
        padding_mask = np.asarray(keras.ops.convert_to_numpy(x["padding_mask"]), bool)
        if token_ids.ndim == 1:
            return self.generate_postprocess(
                {"token_ids": token_ids[None], "padding_mask": padding_mask[None]},
                None if unknown_words is None else [unknown_words], prompt_included)[0]
        tokens, size = self.vocabulary.tokens, len(self.vocabulary)
        texts = []
        for row, (ids, mask) in enumerate(zip(token_ids, padding_mask)):
            extra = unknown_words[row] if unknown_words is not None else []
            ids = ids[mask][1:] if prompt_included else ids[mask]
            texts.append(_joined([tokens[i] if i < size else
                                  extra[i - size] if i - size < len(extra) else UNK_TOKEN
                                  for i in ids]))
        return [t[:-1] if t.endswith("\n") else t for t in texts]

    def score_inputs(self, texts, max_word_length=None):
        """Whole texts -> NumPy ids for `score_text`, read by the corpus readers themselves.

        Args:
            texts: a str or a sequence of str.
            max_word_length: optional int. Also spell each input token (`token_chars` int32
                `(batch_size, T, max_word_length)`, zeros in padding), for a model with
                character inputs: a word outside the vocabulary keeps its characters.

        Returns:
            A dict with `token_ids`, `target_ids` int32 `(batch_size, T)` and `padding_mask`
            bool `(batch_size, T)` (`T` the longest text's token count, no truncation; padding
            holds id 0), `tokens`, a list of each text's tokens, and with `max_word_length`
            `token_chars`.
        """
        vocabulary = self.vocabulary
        if vocabulary is None:
            raise ValueError("The preprocessor has no vocabulary: give one to its constructor "
                             "or set_vocabulary().")
        texts = _checked_texts(texts)
        tokens = [text_tokens(text) for text in texts]
        steps = max(len(t) for t in tokens)
        token_ids = np.zeros((len(texts), steps), np.int32)
        target_ids = np.zeros((len(texts), steps), np.int32)
        padding_mask = np.zeros((len(texts), steps), bool)
        start = vocabulary.token_to_id(EOS_TOKEN)
        for row, row_tokens in enumerate(tokens):
            ids = vocabulary.encode(row_tokens)
            target_ids[row, :len(ids)] = ids
            token_ids[row, :len(ids)] = np.concatenate([[start], ids[:-1]])
            padding_mask[row, :len(ids)] = True
        batch = {"token_ids": token_ids, "target_ids": target_ids, "padding_mask": padding_mask,
                 "tokens": tokens}
        if max_word_length is not None:
            chars = np.zeros((len(texts), steps, max_word_length), np.int32)
            for row, row_tokens in enumerate(tokens):
                read = [EOS_TOKEN] + list(row_tokens[:-1])  # the words before each target
                chars[row, :len(read)] = word_characters(read, max_word_length)
            batch["token_chars"] = chars
        return batch

    def save_to_preset(self, preset_dir):
        with vocabulary_in_assets():  # the tokens in the asset, not in preprocessor.json
            super().save_to_preset(preset_dir)

    def get_config(self):
        config = super().get_config()
        for key in ("add_start_token", "add_end_token"):
            config.pop(key, None)
        return config

    @classmethod
    def from_config(cls, config):
        # keras-hub's `from_config` deserialises the tokenizer into the dict it is given: a copy,
        # so the caller's config stays as it was.
        return super().from_config(dict(config))


def _joined(words):
    """Words as `WordTokenizer.detokenize` joins them: spaces, `<eos>` a line break."""
    text = ""
    for word in words:
        if word == EOS_TOKEN:
            text += "\n"
        else:
            text += (" " if text and not text.endswith("\n") else "") + word
    return text


def _holds_ids(x):
    """Whether `x` is already ids (a dict of model inputs, or a numeric array or tensor)."""
    if isinstance(x, dict):
        return True
    if isinstance(x, (str, bytes)):
        return False
    if isinstance(x, (list, tuple)):
        return bool(x) and not any(isinstance(v, (str, bytes)) for v in x)
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return False
    name = str(getattr(dtype, "name", dtype))
    return "string" not in name and "str" not in name and name != "object"


def _checked_texts(texts):
    """`texts` as a non-empty list of str; a clear error for anything else."""
    if isinstance(texts, str):
        return [texts]
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
    return texts
