"""Hostile inputs (docs/hostile_inputs.md, "Serving signatures"): The serving signatures' inputs:
NaN states, too long requests, wrong dtypes, empty batches. Each is refused with a message naming
it, and nothing a user has is touched (every pre-existing file byte-identical afterwards)."""

import contextlib
import socket

import numpy as np
import tensorflow as tf

from psmm_tf.evaluation import NeuralCache
from psmm_tf.export import testing
from psmm_tf.export.clients import LocalClient, RestClient, ServingError
from psmm_tf.export.serving_module import DEFAULT_MAX_TOKENS, ServingModule


class ServingInputsTest(tf.test.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.client = LocalClient(testing.shared_export()[2])

    def test_nan_or_inf_in_float_state_is_refused_naming_the_input(self):
        state = self.client.predict("initial_state", {"stream_ids": np.zeros([1], np.int32)})
        texts = np.array(["the cat sat\n"], object)
        ids = {"token_ids": np.array([[2, 3, 4]], np.int32), "lengths": np.array([3], np.int32)}
        for name, value in [("lstm_state", np.nan), ("memory_hidden", np.inf),
                            ("lstm_state", -np.inf)]:
            bad = {**state, name: state[name].copy()}
            bad[name].reshape(-1)[0] = value
            for signature, inputs in [("score_text_stream", {"texts": texts}),
                                      ("score_stream", ids)]:
                with self.subTest(name=name, value=value, signature=signature):
                    with self.assertRaisesRegex(ServingError,
                                                rf"`{name}` holds NaN or infinite values"):
                        self.client.predict(signature, {**inputs, **bad})
        outputs = self.client.predict("score_text_stream", {"texts": texts, **state})
        self.assertTrue(np.isfinite(outputs["perplexity"]).all())

    def test_requests_longer_than_the_limit_are_refused_naming_the_input(self):
        words = DEFAULT_MAX_TOKENS  # plus the <eos> of the line: one token too many
        texts = np.array(["the " * words + "\n"], object)
        for signature in ("score_text", "serving_default", "predict_next"):
            with self.subTest(signature=signature):
                inputs = {"texts": texts}
                if signature == "predict_next":
                    inputs = {"texts": np.array(["the " * (words + 1)], object),
                              "k": np.array(3, np.int32)}
                with self.assertRaisesRegex(ServingError, rf"`texts` is too long: a request "
                                                          rf"holds at most {DEFAULT_MAX_TOKENS}"):
                    self.client.predict(signature, inputs)
        ids = np.full([2, DEFAULT_MAX_TOKENS // 2 + 1], 2, np.int32)
        with self.assertRaisesRegex(ServingError, r"`token_ids` is too long"):
            self.client.predict("score", {"token_ids": ids,
                                          "lengths": np.array([3, 3], np.int32)})

    def test_nan_in_the_cache_state_is_refused_naming_it(self):
        model, vocabulary_file, _ = testing.shared_export()
        module = ServingModule(NeuralCache(model, window=4, theta=0.3, lam=0.1), vocabulary_file)
        state = module.initial_state({"stream_ids": tf.constant([0])})
        texts = tf.constant(["the cat sat"])
        self.assertIn("cache_hidden", state)
        ok = module.score_text_stream({"texts": texts, **state})
        self.assertTrue(np.isfinite(ok["perplexity"].numpy()).all())
        bad = tf.tensor_scatter_nd_update(state["cache_hidden"], [[0, 1, 2]], [np.nan])
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"`cache_hidden` holds NaN or infinite values"):
            module.score_text_stream({"texts": texts, **state, "cache_hidden": bad})

    def test_the_limit_is_the_modules(self):
        model, vocabulary_file, _ = testing.shared_export()
        module = ServingModule(model, vocabulary_file, max_tokens=10)
        ok = module.score_text({"texts": tf.constant(["the cat sat on the mat"])})
        self.assertEqual(int(ok["num_tokens"][0]), 7)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"`texts` is too long: a request holds at most 10 tokens"):
            module.score_text({"texts": tf.constant(["the cat sat on the mat", "a b c d e"])})
        with self.assertRaisesRegex(ValueError, r"max_tokens must be >= 1, got 0"):
            ServingModule(model, vocabulary_file, max_tokens=0)


class SignatureDtypeTest(tf.test.TestCase):
    """Wrong dtypes are named by every client before a request leaves (the signature's own
    error names the input by position only, and truncates a NumPy float array silently)."""

    def test_every_client_names_a_wrong_dtype(self):
        with socket.socket() as sock:  # nothing listens: the check must come first
            sock.bind(("127.0.0.1", 0))
            closed = sock.getsockname()[1]
        clients = {"local": LocalClient(testing.shared_export()[2]),
                   "rest": RestClient(f"http://127.0.0.1:{closed}", "psmm", timeout=5)}
        with contextlib.suppress(ImportError):
            from psmm_tf.export.clients import GrpcClient

            clients["grpc"] = GrpcClient(f"127.0.0.1:{closed}", "psmm", timeout=5)
        state = clients["local"].predict("initial_state",
                                          {"stream_ids": np.zeros([1], np.int32)})
        cases = [
            ("score", {"token_ids": np.array([[2.0, 3.5]]), "lengths": np.array([2], np.int32)},
             r"`token_ids` must be int32; got float64 values"),
            ("score", {"token_ids": np.array([[2, 3]], np.int32), "lengths": np.array([2.0])},
             r"`lengths` must be int32; got float64"),
            ("score_text", {"texts": np.array([1, 2])}, r"`texts` must hold strings"),
            ("predict_next", {"texts": np.array(["a"], object), "k": np.array(2.5)},
             r"`k` must be int32; got float64"),
            ("score_text_stream", {"texts": np.array(["a"], object), **state,
                                   "memory_mask": state["memory_mask"].astype(np.float32)},
             r"`memory_mask` must be bool; got float32"),
            ("score_text_stream", {"texts": np.array(["a"], object), **state,
                                   "lstm_state": state["lstm_state"].astype(str)},
             r"`lstm_state` must be float32; got <U"),
            ("initial_state", {"stream_ids": np.array([2**40])},
             r"`stream_ids` holds values outside the range of int32"),
        ]
        for name, client in clients.items():
            for signature, inputs, message in cases:
                with self.subTest(client=name, signature=signature, message=message):
                    with self.assertRaisesRegex(ServingError, message):
                        client.predict(signature, inputs)

    def test_empty_batches_and_huge_state_batches_are_refused_naming_the_input(self):
        client = LocalClient(testing.shared_export()[2])
        state = client.predict("initial_state", {"stream_ids": np.zeros([1], np.int32)})
        empty = np.array([], object)
        for signature, inputs in [
            ("score_text", {"texts": empty}),
            ("predict_next", {"texts": empty, "k": np.array(3, np.int32)}),
            ("score_text_stream", {"texts": empty, **{k: v[:0] for k, v in state.items()}}),
        ]:
            with self.subTest(signature=signature):
                with self.assertRaisesRegex(ServingError, r"`texts` is an empty batch"):
                    client.predict(signature, inputs)
        # A few bytes per stream would become ~100 KB of state each (2**31 streams took a
        # server's whole memory when initial_state took a scalar batch_size).
        with self.assertRaisesRegex(ServingError, rf"`stream_ids` holds too many streams: a "
                                                  rf"request starts at most {DEFAULT_MAX_TOKENS}; "
                                                  rf"got\] \[{DEFAULT_MAX_TOKENS + 1}\]"):
            client.predict("initial_state",
                           {"stream_ids": np.zeros([DEFAULT_MAX_TOKENS + 1], np.int32)})
        outputs = client.predict("score", {"token_ids": np.zeros([0, 3], np.int32),
                                           "lengths": np.zeros([0], np.int32)})
        self.assertEqual(outputs["log_probs"].shape, (0, 3))  # an empty id batch is fine


if __name__ == "__main__":
    tf.test.main()
