"""Data layer: corpus readers, vocabulary, token windows (NumPy and tf.data), TFDS builders.

Text -> `read_tokens` / `load_splits` -> `Vocabulary.encode` -> ids -> `training_windows` /
`evaluation_windows` (tf.data) or `iter_training_windows` / `iter_evaluation_windows` (NumPy) ->
dicts of `token_ids`, `token_mask`, `targets`, `target_weights`.

The tf.data pipeline's names and the TFDS names (`load_token_ids`, `TFDS_BUILDERS`) are
imported on first use: the readers, the vocabulary and the NumPy windows need neither TensorFlow
nor tensorflow_datasets (a model's preprocessor loads on any Keras backend, the `Evaluator`
runs on JAX without TensorFlow).
"""

from psmm_tf.data.corpus import (
    DATASETS,
    EOS_TOKEN,
    SPLITS,
    UNK_TOKEN,
    find_split_files,
    iter_lines,
    iter_tokens,
    line_tokens,
    load_splits,
    read_token_ids,
    read_tokens,
    split_file_names,
    text_tokens,
)
from psmm_tf.data.synthetic import (
    COMMON_WORDS,
    entity_tokens,
    generate_corpus,
    write_synthetic_splits,
)
from psmm_tf.data.vocabulary import Vocabulary, validate_ids
from psmm_tf.data.windows import (
    evaluation_steps,
    evaluation_window_arrays,
    iter_evaluation_windows,
    iter_training_windows,
    split_into_streams,
    steps_per_epoch,
    stream_length,
)

_LAZY_TFDS = {"load_token_ids": "load_token_ids", "TFDS_BUILDERS": "BUILDERS"}
_LAZY_PIPELINE = ("evaluation_windows", "training_windows")


def __getattr__(name):
    if name in _LAZY_TFDS:
        from psmm_tf.data import tfds_builders

        return getattr(tfds_builders, _LAZY_TFDS[name])
    if name in _LAZY_PIPELINE:
        from psmm_tf.data import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COMMON_WORDS",
    "DATASETS",
    "EOS_TOKEN",
    "SPLITS",
    "TFDS_BUILDERS",
    "UNK_TOKEN",
    "Vocabulary",
    "entity_tokens",
    "evaluation_steps",
    "evaluation_window_arrays",
    "evaluation_windows",
    "find_split_files",
    "generate_corpus",
    "iter_evaluation_windows",
    "iter_training_windows",
    "iter_lines",
    "iter_tokens",
    "line_tokens",
    "load_splits",
    "load_token_ids",
    "read_token_ids",
    "read_tokens",
    "split_file_names",
    "split_into_streams",
    "steps_per_epoch",
    "stream_length",
    "text_tokens",
    "training_windows",
    "validate_ids",
    "write_synthetic_splits",
]
