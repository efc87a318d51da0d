"""TF Serving warmup requests: `assets.extra/tf_serving_warmup_requests` of an export.

TF Serving replays these `PredictionLog` records when it loads a version, before it reports the
version available, so the first real requests do not pay for graph optimisation and memory
allocation. The requests cover every signature at two batch sizes and two lengths, batch-major
as a batching server sends them (`k` and `stream_ids` one value per row); the stream
signatures of an export with a neural cache get its state too.
"""

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from psmm_tf.export.fingerprint import vocabulary_fingerprint

WARMUP_FILE = "tf_serving_warmup_requests"


def sample_texts(tokens, batch_size, num_words, seed=0):
    """`batch_size` texts of `num_words` vocabulary words (no `<unk>`/`<eos>`) each."""
    words = [t for t in tokens if t not in ("<unk>", "<eos>")] or ["<unk>"]
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, size=num_words)) for _ in range(batch_size)]


def zero_state(batch_size, num_layers, hidden_dim, memory_size, eos_id, fingerprint,
               cache_window=None):
    """The state inputs of the stream signatures for `batch_size` fresh texts (numpy), as
    `initial_state` returns them; `fingerprint` is the vocabulary's
    (`psmm_tf.export.fingerprint.vocabulary_fingerprint`).

    With `cache_window` (int `W`), also the neural cache's `cache_hidden` `(B, W, H)`,
    `cache_ids` `(B, W)` and `cache_mask` `(B, W)`.
    """
    state = {
        "lstm_state": np.zeros([batch_size, num_layers, 2, hidden_dim], np.float32),
        "memory_hidden": np.zeros([batch_size, memory_size, hidden_dim], np.float32),
        "memory_ids": np.zeros([batch_size, memory_size], np.int32),
        "memory_mask": np.zeros([batch_size, memory_size], bool),
        "last_id": np.full([batch_size], eos_id, np.int32),
        "vocabulary_fingerprint": np.full([batch_size], fingerprint, np.int32),
    }
    if cache_window is not None:
        state.update({
            "cache_hidden": np.zeros([batch_size, cache_window, hidden_dim], np.float32),
            "cache_ids": np.zeros([batch_size, cache_window], np.int32),
            "cache_mask": np.zeros([batch_size, cache_window], bool),
        })
    return state


def warmup_inputs(tokens, num_layers, hidden_dim, memory_size, eos_id, cache_window=None,
                  max_tokens=None):
    """`(signature_name, inputs)` pairs: every signature at batch sizes 1 and 8.

    Args:
        tokens: sequence of str. The vocabulary.
        num_layers, hidden_dim, memory_size: the model's state sizes.
        eos_id: int. The id of `<eos>`.
        cache_window: optional int. The neural cache's window, for exports with a cache.
        max_tokens: optional int. The export's request limit (batch x longest text, a text's
            `<eos>` included): the requests are shortened, or a batch size left out, to fit it,
            so that the server's own warmup is never refused.

    Returns:
        list of `(str, dict of numpy arrays)`.

    Raises:
        ValueError: `max_tokens` < 2 (one word and its `<eos>`).
    """
    if max_tokens is not None and max_tokens < 2:
        raise ValueError(f"max_tokens must be >= 2 (a one-word text and its <eos>), got "
                         f"{max_tokens}.")
    requests = []
    for batch_size, num_words in ((1, 20), (8, 60)):
        if max_tokens is not None:
            num_words = min(num_words, max_tokens // batch_size - 1)  # + <eos> per text
            if num_words < 1:
                continue
        texts = np.array(sample_texts(tokens, batch_size, num_words, seed=batch_size), object)
        ids = np.random.default_rng(batch_size).integers(
            0, len(tokens), size=(batch_size, num_words)).astype(np.int32)
        lengths = np.full([batch_size], num_words, np.int32)
        state = zero_state(batch_size, num_layers, hidden_dim, memory_size, eos_id,
                           vocabulary_fingerprint(tokens), cache_window)
        requests += [
            ("serving_default", {"texts": texts}),
            ("score", {"token_ids": ids, "lengths": lengths}),
            ("score_text_stream", {"texts": texts, **state}),
            ("score_stream", {"token_ids": ids, "lengths": lengths, **state}),
            ("predict_next", {"texts": texts, "k": np.full([batch_size], 10, np.int32)}),
            ("initial_state", {"stream_ids": np.arange(batch_size, dtype=np.int32)}),
        ]
    return requests


def prediction_log(model_name, signature_name, inputs):
    """A `PredictionLog` holding one `PredictRequest`."""
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name))
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=request))


def write_warmup_file(path, model_name, requests):
    """Writes `(signature_name, inputs)` pairs as a TFRecord file of `PredictionLog`s."""
    with tf.io.TFRecordWriter(path) as writer:
        for signature_name, inputs in requests:
            writer.write(prediction_log(model_name, signature_name, inputs).SerializeToString())


def read_warmup_file(path):
    """The `PredictionLog`s of a warmup file."""
    logs = []
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        logs.append(prediction_log_pb2.PredictionLog.FromString(record))
    return logs
