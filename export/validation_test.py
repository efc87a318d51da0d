"""Bad inputs to every signature get an InvalidArgumentError that names the input."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from psmm_tf.export import testing
from psmm_tf.export.clients import LocalClient, ServingError

BAD_INPUTS = (
    ("ids_too_large", "score", {"token_ids": [[2, 24]], "lengths": [2]},
     r"`token_ids` holds a token id outside \[0, 24\)"),
    ("negative_id", "score", {"token_ids": [[-1, 3]], "lengths": [2]},
     r"`token_ids` holds a token id outside"),
    ("negative_length", "score", {"token_ids": [[2, 3]], "lengths": [-1]},
     r"`lengths` must be >= 1"),
    ("zero_length", "score", {"token_ids": [[2, 3]], "lengths": [0]}, r"`lengths` must be >= 1"),
    ("length_beyond_time", "score", {"token_ids": [[2, 3]], "lengths": [3]},
     r"`lengths` must be <= the time dimension of `token_ids`"),
    ("lengths_per_row", "score", {"token_ids": [[2, 3]], "lengths": [1, 2]},
     r"`lengths` must hold one length per row of `token_ids`"),
    ("ids_rank_1", "score", {"token_ids": [2, 3], "lengths": [2]},
     r"`token_ids` must have rank 2, \[batch_size, time\]"),
    ("lengths_rank_0", "score", {"token_ids": [[2, 3]], "lengths": 2},
     r"`lengths` must have rank 1"),
    ("texts_scalar", "serving_default", {"texts": "the cat"}, r"`texts` must have rank 1"),
    ("texts_rank_2", "score_text", {"texts": [["the cat"]]}, r"`texts` must have rank 1"),
    ("empty_text", "serving_default", {"texts": ["the cat", ""]},
     r"`texts` holds an empty string"),
    ("invalid_utf8", "serving_default", {"texts": [b"the \xff cat"]},
     r"`texts` holds text that is not valid UTF-8"),
    ("k_zero", "predict_next", {"texts": ["the"], "k": 0}, r"`k` must be in \[1, 24\]"),
    ("k_too_large", "predict_next", {"texts": ["the"], "k": 25}, r"`k` must be in \[1, 24\]"),
    ("k_one_row_too_large", "predict_next", {"texts": ["the", "a"], "k": [3, 25]},
     r"`k` must be in \[1, 24\]"),
    ("k_rank_2", "predict_next", {"texts": ["the"], "k": [[3]]}, r"`k` must have rank 1"),
    ("k_per_row", "predict_next", {"texts": ["the", "a"], "k": [3]},
     r"`k` must have shape \[batch_size\], one k per text"),
    ("stream_ids_scalar", "initial_state", {"stream_ids": 2}, r"`stream_ids` must have rank 1"),
    ("too_many_streams", "initial_state", {"stream_ids": np.zeros([20_001], np.int32)},
     r"`stream_ids` holds too many streams: a request starts at most 20000"),
)

# Changes to a valid state of batch size 1 (tiny model: 2 layers, hidden 16, window 8).
BAD_STATES = (
    ("layers", "lstm_state", np.zeros([1, 3, 2, 16], np.float32),
     r"`lstm_state` must have shape \[batch_size, num_layers=2, 2, hidden_dim=16\]"),
    ("hidden_rank", "memory_hidden", np.zeros([1, 7], np.float32),
     r"`memory_hidden` must have rank 3"),
    ("hidden_width", "memory_hidden", np.zeros([1, 7, 15], np.float32),
     r"`memory_hidden` must have shape \[batch_size, memory_size=7, hidden_dim=16\]"),
    ("memory_length", "memory_ids", np.zeros([1, 8], np.int32), r"`memory_ids` must have shape"),
    ("mask_batch", "memory_mask", np.zeros([2, 7], bool), r"`memory_mask` must have shape"),
    ("memory_id_range", "memory_ids", np.full([1, 7], 24, np.int32),
     r"`memory_ids` holds a token id outside"),
    ("last_id_range", "last_id", np.array([-2], np.int32), r"`last_id` holds a token id outside"),
    ("fingerprint_rank", "vocabulary_fingerprint", np.zeros([1, 1], np.int32),
     r"`vocabulary_fingerprint` must have rank 1"),
    ("fingerprint_batch", "vocabulary_fingerprint", np.zeros([2], np.int32),
     r"`vocabulary_fingerprint` must have shape \[batch_size\]"),
    ("fingerprint_value", "vocabulary_fingerprint", np.array([7], np.int32),
     r"`vocabulary_fingerprint`: state row 0 came from an export of another vocabulary "
     r"\(fingerprint 7;"),
)


class BadInputTest(tf.test.TestCase, parameterized.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.export_dir = testing.shared_export()[2]
        cls.signatures = tf.saved_model.load(cls.export_dir).signatures
        cls.state = {k: v.numpy() for k, v in
                     cls.signatures["initial_state"](stream_ids=tf.constant([0])).items()}

    def call(self, name, inputs):
        _, specs = self.signatures[name].structured_input_signature
        return self.signatures[name](**{k: tf.constant(v, specs[k].dtype)
                                        for k, v in inputs.items()})

    @parameterized.named_parameters(*BAD_INPUTS)
    def test_bad_input_is_named(self, signature, inputs, message):
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message):
            self.call(signature, inputs)

    @parameterized.named_parameters(*BAD_STATES)
    def test_bad_state_is_named(self, name, value, message):
        for signature, inputs in (("score_text_stream", {"texts": ["the cat"]}),
                                  ("score_stream", {"token_ids": [[2, 3]], "lengths": [2]})):
            with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message):
                self.call(signature, {**inputs, **self.state, name: value})

    def test_state_of_another_batch_size(self):
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"`lstm_state` must have shape \[batch_size"):
            self.call("score_text_stream", {"texts": ["the cat", "a dog"], **self.state})

    def test_the_valid_neighbours_pass(self):
        # The same requests made valid: so the failures above are about the named input.
        self.call("score", {"token_ids": [[2, 23, -5]], "lengths": [2]})  # padding: any id
        self.call("score_stream", {"token_ids": [[2, 3]], "lengths": [2], **self.state})
        self.call("predict_next", {"texts": [""], "k": 24})  # "" is a fresh context here
        self.call("predict_next", {"texts": ["the", "a"], "k": [3, 24]})
        self.call("initial_state", {"stream_ids": np.zeros([0], np.int32)})

    def test_wrong_dtype(self):
        # The signature binding rejects it before the graph runs (by position, not name) ...
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, r"expected to be a int32"):
            self.signatures["score"](token_ids=tf.constant([[2.0, 3.0]]),
                                     lengths=tf.constant([2]))
        # ... and the clients (psmm-score, the test servers) name it.
        client = LocalClient(self.export_dir)
        with self.assertRaisesRegex(ServingError, r"`token_ids` must be int32; got float64"):
            client.predict("score", {"token_ids": [[2.0, 3.5]], "lengths": [2]})
        with self.assertRaisesRegex(ServingError, r"`lengths` holds values outside"):
            client.predict("score", {"token_ids": [[2, 3]], "lengths": [2**40]})
        with self.assertRaisesRegex(ServingError, r"`k` must have shape \[batch_size\]"):
            client.predict("predict_next", {"texts": ["a"], "k": [1, 2]})
