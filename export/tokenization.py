"""The training tokenization (PTB/WikiText format) as TensorFlow string ops, for the signatures.

The ops live in the library (`psmm_tf.models.tokenizer.text_tokens`, also the `WordTokenizer`
of keras-hub pipelines): one tokenization for training, keras-hub preprocessing and serving.
A served text is read as if it were a small corpus file (see that module).
"""

from psmm_tf.data import corpus
from psmm_tf.models.tokenizer import text_tokens

EOS_TOKEN = corpus.EOS_TOKEN
UNK_TOKEN = corpus.UNK_TOKEN

__all__ = ["EOS_TOKEN", "UNK_TOKEN", "reference_tokens", "text_tokens"]


def reference_tokens(text, finish_last_line=True):
    """`text_tokens` for one Python string: the corpus readers' `psmm_tf.data.text_tokens`.

    Args:
        text: str.
        finish_last_line: bool, as for `text_tokens`.

    Returns:
        list[str].
    """
    return corpus.text_tokens(text, finish_last_line)
