"""Word-level tokenization as the corpora are read, for keras-hub pipelines and the signatures.

The corpus readers (`psmm_tf.data.corpus`) split a file into lines on `\\n`, split each line on
whitespace with Python's `str.split()` and append one `<eos>` per line (a blank line is one
`<eos>`). `text_tokens` does the same with TensorFlow string ops, so it runs inside `tf.data`,
in keras-hub's preprocessing and in the SavedModel's signatures:

- a final `\\n` ends the last line (as in a file) rather than starting an empty one;
- every line, blank ones included, gives its words followed by `<eos>`;
- for a prompt (next-word prediction, `generate`) the last line is unfinished: it gets no
  `<eos>` (so a prompt that ends in `\\n` asks for the first word of the next line).

`tf.strings.split` knows ASCII whitespace only, so the other characters Python's `str.split()`
splits on (`\\x1c`-`\\x1f`, `\\x85`, `\\xa0`, `\\u2028`, ...) are first replaced by spaces. The
set is computed from the running Python, so the graph matches the readers exactly.

Preprocessing in keras-hub is TensorFlow on every Keras backend; the model itself is not.
"""

import contextlib
import threading

import keras
import keras_hub
from keras_hub.src.utils.tensor_utils import preprocessing_function

from psmm_tf.data.corpus import EOS_TOKEN
from psmm_tf.data.vocabulary import Vocabulary
from psmm_tf.models.backbone import LSTMBackbone

try:
    import tensorflow as tf
except ImportError:  # a host with JAX alone: the models, layers and JaxTrainStep still work
    tf = None
if tf is not None and not hasattr(tf, "constant"):  # a folder left by a partial uninstall
    tf = None

VOCABULARY_ASSET = "vocabulary.txt"
# Set while a preset is written (`vocabulary_in_assets`).
_WRITING_PRESET = threading.local()

# Whitespace of `str.split()` that `tf.strings.split` (ASCII isspace) does not split on.
_EXTRA_WHITESPACE = [chr(c) for c in range(0x110000)
                     if chr(c).isspace() and (not chr(c).isascii() or 0x1C <= c <= 0x1F)]
_EXTRA_WHITESPACE_PATTERN = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in _EXTRA_WHITESPACE) + "]"


def require_tensorflow(what):
    """Raises a clear ImportError where `what` needs TensorFlow's string ops and it is absent."""
    if tf is None:
        raise ImportError(
            f"{what} reads and writes text with TensorFlow string ops, and TensorFlow is not "
            "installed: pip install tensorflow. The models, layers, losses and JaxTrainStep "
            "work without it, on token ids; a model saved with its preprocessor (psmm-train's "
            "model.keras) needs it to load.")


@contextlib.contextmanager
def vocabulary_in_assets():
    """Within it `WordTokenizer.get_config` leaves the tokens to the vocabulary asset: for the
    `save_to_preset`s, whose JSON files would otherwise each repeat them."""
    before = getattr(_WRITING_PRESET, "active", False)
    _WRITING_PRESET.active = True
    try:
        yield
    finally:
        _WRITING_PRESET.active = before


def _writing_a_file():
    """Whether a config is being written beside the tokenizer's assets: a preset
    (`vocabulary_in_assets`) or a `.keras` file (Keras' saver serialises the model inside its
    object-sharing scope, and only its saver and loader open one)."""
    from keras.src.backend.common import global_state

    return (getattr(_WRITING_PRESET, "active", False) or
            global_state.get_global_attribute("shared_objects/id_to_config_map") is not None)


def text_tokens(texts, finish_last_line=True):
    """Tokens of a batch of texts: each line's whitespace-split words followed by `<eos>`.

    Args:
        texts: string `(batch_size,)`, valid UTF-8 (checked by the caller).
        finish_last_line: bool. True (scoring, training): a final `\\n` is dropped and every
            line ends with `<eos>`. False (a prompt): the last line gets no `<eos>`.

    Returns:
        A string `tf.RaggedTensor` `(batch_size, (num_tokens))`.
    """
    texts = tf.strings.regex_replace(texts, _EXTRA_WHITESPACE_PATTERN, " ")
    if finish_last_line:
        texts = tf.strings.regex_replace(texts, r"\n\z", "")
    lines = tf.strings.split(texts, "\n")  # (batch, (lines))
    words = tf.strings.split(lines.values)  # (all lines, (words))
    eos = tf.fill([tf.shape(words.row_splits)[0] - 1, 1], EOS_TOKEN)
    line_tokens = tf.concat([words, tf.RaggedTensor.from_tensor(eos)], axis=1)
    tokens = tf.RaggedTensor.from_row_splits(line_tokens, lines.row_splits).merge_dims(1, 2)
    if not finish_last_line:
        tokens = tokens[:, :-1]
    return tokens


def spell_tokens(tokens, max_word_length):
    """`psmm_tf.data.spelling.word_characters` with TensorFlow string ops, for the signatures.

    Args:
        tokens: string tensor of any shape `S`.
        max_word_length: int W. Characters per word, markers included.

    Returns:
        int32 `S + (W,)`: `[begin, bytes..., end, pad...]` (ids 1, 3 + byte, 2, 0); a longer
        word keeps its first `W - 2` bytes.
    """
    width = max_word_length - 2
    length = tf.minimum(tf.strings.length(tokens), width)[..., None]  # bytes kept
    raw = tf.cast(tf.io.decode_raw(tokens, tf.uint8, fixed_length=width), tf.int32)
    position = tf.range(width + 1)
    body = tf.where(position[:width] < length, raw + 3, 0)  # 3 + byte
    body = tf.concat([body, tf.zeros_like(body[..., :1])], axis=-1)
    body = tf.where(position == length, 2, body)  # the end marker after the last byte
    return tf.concat([tf.ones_like(body[..., :1]), body], axis=-1)  # the begin marker


@keras.saving.register_keras_serializable(package="psmm_tf")
class WordTokenizer(keras_hub.tokenizers.Tokenizer):
    """Texts -> word ids as the training corpus is read; ids -> text.

    keras-hub's Tokenizer for the package's word-level models. `tokenize` reads each text as a
    corpus file (`text_tokens`: each line's words followed by `<eos>`; unknown words become
    `<unk>`); `detokenize` joins words with spaces and turns `<eos>` into a line break, so
    `detokenize(tokenize(text))` is the text with its whitespace normalised. Both are
    TensorFlow string ops: they run eagerly, inside `tf.data` (`ds.map(tokenizer)`) and on
    every Keras backend. The vocabulary is in its config (its tokens) in memory; a `.keras` file
    or a preset holds it once, as the asset `vocabulary.txt`.

    `<eos>` is the start token (the first word of a text is predicted after it, as after the end
    of a previous line) and the end token (`generate` stops there by default).

    Args:
        vocabulary: a `psmm_tf.data.Vocabulary`, a sequence of tokens (id order) holding
            `<unk>` and `<eos>`, the path of a vocabulary file, or None (set by `load_assets`).
        sequence_length: optional int. Pad (id 0) or truncate every text to this many tokens;
            None returns a ragged batch.
        finish_last_line: bool. False reads a text as a prompt: its last line gets no `<eos>`.

    Call arguments:
        inputs: a str, a list of str or a string tensor `(batch_size,)` (or a scalar).

    Returns:
        int32 ids: a `tf.RaggedTensor` `(batch_size, (num_tokens))` (a 1-D tensor for a scalar
        input), dense `(batch_size, sequence_length)` with `sequence_length` set.

    Example:
    ```python
    from psmm_tf.data import Vocabulary
    from psmm_tf.models import WordTokenizer

    tokenizer = WordTokenizer(Vocabulary.build("the cat sat <eos>".split()))
    ids = tokenizer("the cat sat\\n")       # the ids of the, cat, sat, <eos>
    text = tokenizer.detokenize(ids)         # "the cat sat\\n"
    ```
    """

    # keras-hub's loaders pick the tokenizer of a preset by its backbone's class.
    backbone_cls = LSTMBackbone

    def __init__(self, vocabulary=None, sequence_length=None, finish_last_line=True,
                 dtype="int32", **kwargs):
        require_tensorflow("WordTokenizer")
        super().__init__(dtype=dtype, **kwargs)
        self.sequence_length = sequence_length
        self.finish_last_line = finish_last_line
        self.vocabulary = None
        self.set_vocabulary(vocabulary)
        self.file_assets = [VOCABULARY_ASSET]

    def set_vocabulary(self, vocabulary):
        """Sets the vocabulary from a `Vocabulary`, a sequence of tokens or a file path."""
        if vocabulary is None:
            self.vocabulary = None
            object.__setattr__(self, "_table", None)
            return
        if isinstance(vocabulary, str):
            vocabulary = Vocabulary.load(vocabulary)
        elif not isinstance(vocabulary, Vocabulary):
            vocabulary = Vocabulary(list(vocabulary))
        if vocabulary.eos_id is None:
            raise ValueError(f"The vocabulary has no {EOS_TOKEN} token: a word-level language "
                             "model needs it to end lines.")
        self.vocabulary = vocabulary
        # Built eagerly (a tf.data pipeline cannot create it); kept out of Keras' and
        # TensorFlow's tracking: it is rebuilt from the vocabulary asset, not checkpointed.
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(vocabulary.tokens)),
                tf.range(len(vocabulary), dtype=tf.int32)),
            default_value=vocabulary.unk_id)
        object.__setattr__(self, "_table", table)
        object.__setattr__(self, "_tokens", tf.constant(list(vocabulary.tokens)))
        self._add_special_token(EOS_TOKEN, "start_token")
        self._add_special_token(EOS_TOKEN, "end_token")
        self._update_special_token_ids()

    @property
    def special_tokens(self):
        # `<eos>` ends lines inside a text: it is never stripped from a detokenized text.
        return []

    def _check_vocabulary(self):
        if self.vocabulary is None:
            raise ValueError("The tokenizer has no vocabulary: give one to its constructor or "
                             "set_vocabulary().")

    def get_vocabulary(self):
        self._check_vocabulary()
        return list(self.vocabulary.tokens)

    def vocabulary_size(self):
        self._check_vocabulary()
        return len(self.vocabulary)

    def id_to_token(self, id):
        self._check_vocabulary()
        if not 0 <= int(id) < len(self.vocabulary):
            raise ValueError(f"id must be in [0, {len(self.vocabulary) - 1}], got {id}.")
        return self.vocabulary.tokens[int(id)]

    def token_to_id(self, token):
        self._check_vocabulary()
        if token not in self.vocabulary:
            raise ValueError(f"Token {token!r} is not in the vocabulary.")
        return self.vocabulary.token_to_id(token)

    @property
    def unk_token_id(self):
        self._check_vocabulary()
        return self.vocabulary.unk_id

    def tokenize(self, inputs, finish_last_line=None):
        self._check_vocabulary()
        return self._tokenize(inputs, finish_last_line=(
            self.finish_last_line if finish_last_line is None else finish_last_line))

    def detokenize(self, inputs):
        self._check_vocabulary()
        return self._detokenize(inputs)

    def call(self, inputs, *args, training=None, **kwargs):
        return self.tokenize(inputs, *args, **kwargs)

    @preprocessing_function
    def _tokenize(self, inputs, finish_last_line):
        texts = tf.convert_to_tensor(inputs)
        if texts.dtype != tf.string:
            raise ValueError(f"WordTokenizer reads strings, got dtype {texts.dtype.name}.")
        scalar = texts.shape.rank == 0
        tokens = text_tokens(tf.reshape(texts, [-1]), finish_last_line)
        ids = tf.ragged.map_flat_values(self._table.lookup, tokens)
        if self.sequence_length is not None:
            ids = ids[:, :self.sequence_length].to_tensor(
                0, shape=[None, self.sequence_length])
        return ids[0] if scalar else ids

    @preprocessing_function
    def _detokenize(self, inputs):
        if not isinstance(inputs, tf.RaggedTensor):
            inputs = tf.convert_to_tensor(inputs)
        scalar = inputs.shape.rank == 1
        if scalar:
            inputs = inputs[tf.newaxis]
        if not isinstance(inputs, tf.RaggedTensor):
            inputs = tf.RaggedTensor.from_tensor(inputs)
        words = tf.ragged.map_flat_values(
            lambda ids: tf.gather(self._tokens, tf.cast(ids, tf.int32)), inputs)
        text = tf.strings.reduce_join(words, axis=-1, separator=" ")
        # "a b <eos> c <eos>" -> "a b\nc\n".
        text = tf.strings.regex_replace(text, f" ?{EOS_TOKEN}( |$)", "\n")
        return text[0] if scalar else text

    def save_assets(self, dir_path):
        if self.vocabulary is not None:
            self.vocabulary.save(f"{dir_path}/{VOCABULARY_ASSET}")

    def load_assets(self, dir_path):
        # A tokenizer saved without a vocabulary wrote no asset.
        if dir_path is not None and tf.io.gfile.exists(f"{dir_path}/{VOCABULARY_ASSET}"):
            self.set_vocabulary(Vocabulary.load(f"{dir_path}/{VOCABULARY_ASSET}"))

    def save_to_preset(self, preset_dir):
        with vocabulary_in_assets():
            super().save_to_preset(preset_dir)

    def get_config(self):
        config = super().get_config()
        # The tokens themselves, so `from_config(get_config())` keeps the vocabulary (as
        # `keras.layers.StringLookup` does); a `.keras` file or a preset holds them once, as
        # the asset (`save_assets`; `load_assets` sets them), as keras-hub's tokenizers do.
        tokens = None if self.vocabulary is None or _writing_a_file() else list(
            self.vocabulary.tokens)
        config.update({"vocabulary": tokens,
                       "sequence_length": self.sequence_length,
                       "finish_last_line": self.finish_last_line})
        return config
