"""Exports with a neural cache (Grave et al. 2017): scores against `NeuralCache` and a NumPy
loop over the equations, streaming with the cache state, predict_next's mixture, bad inputs and
flags, warmup, psmm-score, the TF1 session loader and a fresh process without psmm_tf."""

import io
import json
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from psmm_tf import testing as psmm_testing
from psmm_tf.data import Vocabulary
from psmm_tf.evaluation import CacheSettings, NeuralCache
from psmm_tf.export import (
    CACHE_STATE_NAMES,
    STATE_NAMES,
    export_lib,
    export_saved_model,
    score,
    testing,
    warmup,
)
from psmm_tf.export.clients import LocalClient
from psmm_tf.export.serving_module import ServingModule
from psmm_tf.export.tokenization import reference_tokens

WINDOW, THETA, LAMBDA = 12, 1.5, 0.3  # a cache window longer than the pointer's (8)
SIGNATURES = ("serving_default", "score", "score_text_stream", "score_stream", "predict_next",
              "initial_state")
LINES = ["the cat sat on the mat", "", "a zebra saw the cat", "the cat ran to the zebra",
         "his dog was big and red", "it saw a bird in the tree and the cat"]


def reference_next_word(model, vocab, context, window, theta, lam):
    """`{word: p}` after `context`: the model's mixture (out-of-vocabulary words pointed at
    moved from `<unk>` to themselves) interpolated with the cache over the last `window`
    states, each voting for the word that followed it (a word, not an id)."""
    words = ["<eos>"] + reference_tokens(context, finish_last_line=False)
    outputs = model(vocab.encode(words)[None])
    probs = {w: p for w, p in zip(vocab.tokens, model.distribution(outputs).numpy()[0, -1],
                                  strict=True)}
    if "attention" in outputs:
        for position, word in enumerate(words):
            if word not in vocab:
                mass = outputs["attention"].numpy()[0, -1, position]
                probs["<unk>"] -= mass
                probs[word] = probs.get(word, 0.0) + mass
    hidden = outputs["hidden"].numpy()[0].astype(np.float64)
    last = len(words) - 1
    history = range(max(0, last - window), last)
    if not history:
        return probs
    scores = np.array([theta * hidden[last] @ hidden[i] for i in history])
    weights = np.exp(scores - scores.max())
    weights /= weights.sum()
    mixed = {w: (1 - lam) * p for w, p in probs.items()}
    for weight, i in zip(weights, history, strict=True):
        mixed[words[i + 1]] = mixed.get(words[i + 1], 0.0) + lam * weight
    return mixed


class CacheExportTest(psmm_testing.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp()
        cls.vocab_file = testing.write_vocabulary(os.path.join(cls.tmp, "vocab.txt"))
        cls.vocab = Vocabulary.load(cls.vocab_file)
        cls.model, _ = testing.tiny_model(seed=7)
        cls.model.save(os.path.join(cls.tmp, "model.keras"))
        cls.base = os.path.join(cls.tmp, "base")
        cls.stdout = testing.run_main([
            f"--keras_model={cls.tmp}/model.keras", f"--vocab={cls.vocab_file}",
            f"--export_base={cls.base}", f"--cache_window={WINDOW}", f"--cache_theta={THETA}",
            f"--cache_lambda={LAMBDA}"])
        cls.export_dir = os.path.join(cls.base, "1")
        cls.signatures = tf.saved_model.load(cls.export_dir).signatures
        cls.cache = NeuralCache(cls.model, window=WINDOW, theta=THETA, lam=LAMBDA)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def call(self, name, **inputs):
        _, specs = self.signatures[name].structured_input_signature
        outputs = self.signatures[name](**{k: tf.constant(v, specs[k].dtype)
                                           for k, v in inputs.items()})
        return {k: v.numpy() for k, v in outputs.items()}

    def inputs_of(self, ids):
        """The model's inputs for target ids `(1, T)`: `<eos>` then all but the last."""
        return np.concatenate([[[self.vocab.eos_id]], ids[:, :-1]], axis=1)

    def cache_scores(self, ids):
        """`NeuralCache.score` of one text's ids read after `<eos>`."""
        ids = np.asarray(ids, np.int32)[None]
        return self.cache.score(self.inputs_of(ids), ids)["log_probs"].numpy()[0]

    def numpy_scores(self, ids):
        """The NumPy loop over the equations, on the Keras model's log-probs and states."""
        ids = np.asarray(ids, np.int32)[None]
        inputs = self.inputs_of(ids)
        model_log_probs = self.model.score_with_state(inputs, ids)["log_probs"].numpy()[0]
        hidden = self.model(inputs)["hidden"].numpy()[0].astype(np.float64)
        return psmm_testing.reference_cache_log_probs(model_log_probs, hidden, ids[0], THETA,
                                                      LAMBDA, WINDOW)

    def test_layout_and_recorded_settings(self):
        self.assertIn("assets.extra/neural_cache.json", testing.file_listing(self.export_dir))
        self.assertEqual(testing.servability_problems(self.export_dir), [])
        with open(os.path.join(self.export_dir, "assets.extra", "neural_cache.json")) as f:
            settings = json.load(f)
        self.assertEqual((settings["window"], settings["theta"], settings["lambda"]),
                         (WINDOW, THETA, LAMBDA))
        self.assertIn(f"neural cache: window={WINDOW} theta={THETA} lambda={LAMBDA}",
                      self.stdout)
        self.assertIn("cache_hidden   [batch_size, cache_window, hidden_dim] float32", self.stdout)
        for name in ("score_stream", "score_text_stream"):
            _, specs = self.signatures[name].structured_input_signature
            self.assertContainsSubset(STATE_NAMES + CACHE_STATE_NAMES, set(specs))
            self.assertContainsSubset(STATE_NAMES + CACHE_STATE_NAMES,
                                      set(self.signatures[name].structured_outputs))
        state = self.call("initial_state", stream_ids=list(range(3)))
        self.assertEqual(sorted(state), sorted(STATE_NAMES + CACHE_STATE_NAMES))
        self.assertAllEqual(state["cache_hidden"], np.zeros([3, WINDOW, 16]))
        self.assertAllEqual(state["cache_ids"], np.zeros([3, WINDOW]))
        self.assertAllEqual(state["cache_mask"], np.zeros([3, WINDOW], bool))

    def test_padded_score_equals_neural_cache_numpy_and_one_by_one(self):
        lengths = [30, 9, 21]
        rows = [self.rng.integers(0, 24, size=n).astype(np.int32) for n in lengths]
        padded = np.full([3, 30], -7, np.int32)  # padding may hold any value
        for row, ids in enumerate(rows):
            padded[row, :len(ids)] = ids
        batch = self.call("score", token_ids=padded, lengths=lengths)
        for row, ids in enumerate(rows):
            n = len(ids)
            expected = self.cache_scores(ids)
            self.assertAllClose(batch["log_probs"][row][:n], expected, atol=1e-5)
            self.assertAllClose(batch["log_probs"][row][:n], self.numpy_scores(ids), atol=1e-5)
            single = self.call("score", token_ids=ids[None], lengths=[n])
            self.assertAllClose(batch["log_probs"][row][:n], single["log_probs"][0], atol=1e-5)
            self.assertAllClose(batch["perplexity"][row], np.exp(-expected.mean()), rtol=1e-5)
            # The cache is used from the second token on; the gate is the model's.
            plain = self.model.score_with_state(self.inputs_of(ids[None]), ids[None])
            self.assertAllClose(batch["log_probs"][row][0], plain["log_probs"][0, 0], atol=1e-6)
            self.assertGreater(np.abs(batch["log_probs"][row][1:n] - plain["log_probs"][0, 1:])
                               .max(), 0.05)
            self.assertAllClose(batch["gate"][row][:n], plain["gate"][0], atol=1e-5)

    def test_score_text_equals_neural_cache(self):
        texts = ["\n".join(LINES), "a dog ran\nto the zebra house", "\n"]
        out = self.call("serving_default", texts=texts)
        for row, text in enumerate(texts):
            ids = self.vocab.encode(reference_tokens(text))
            n = len(ids)
            self.assertEqual(out["num_tokens"][row], n)
            self.assertAllClose(out["log_probs"][row][:n], self.cache_scores(ids), atol=1e-5)

    def test_three_streamed_pieces_equal_the_whole(self):
        docs = [self.rng.integers(0, 24, size=n).astype(np.int32) for n in (40, 23)]
        cuts = [(0, 5, 27, 40), (0, 14, 15, 23)]  # pieces shorter and longer than the window
        state = self.call("initial_state", stream_ids=list(range(2)))
        pieces, states = [[], []], []
        for piece in range(3):
            states.append(state)
            lengths = [cut[piece + 1] - cut[piece] for cut in cuts]
            ids = np.zeros([2, max(lengths)], np.int32)
            for row, (doc, cut) in enumerate(zip(docs, cuts, strict=True)):
                ids[row, :lengths[row]] = doc[cut[piece]:cut[piece + 1]]
            out = self.call("score_stream", token_ids=ids, lengths=lengths, **state)
            state = {name: out[name] for name in STATE_NAMES + CACHE_STATE_NAMES}
            for row in range(2):
                pieces[row].append(out["log_probs"][row][:lengths[row]])
        for row, doc in enumerate(docs):
            self.assertAllClose(np.concatenate(pieces[row]), self.cache_scores(doc), atol=1e-5)
        # Without the cache state the pieces would differ: it is what carries the history.
        fresh = self.call("initial_state", stream_ids=list(range(1)))
        carried = {name: value[:1] for name, value in states[2].items()}
        out = self.call("score_stream", token_ids=docs[0][None, 27:], lengths=[13],
                        **{**carried, **{k: fresh[k] for k in CACHE_STATE_NAMES}})
        self.assertNotAllClose(out["log_probs"][0], pieces[0][2], atol=1e-3)
        out = self.call("score_stream", token_ids=docs[0][None, 27:], lengths=[13], **carried)
        self.assertAllClose(out["log_probs"][0], pieces[0][2], atol=1e-5)

    def test_streamed_text_equals_the_whole_text(self):
        whole = self.call("serving_default", texts=["\n".join(LINES)])
        state = self.call("initial_state", stream_ids=list(range(1)))
        log_probs = []
        for chunk in (LINES[:2], LINES[2:3], LINES[3:]):
            out = self.call("score_text_stream", texts=["\n".join(chunk) + "\n"], **state)
            state = {name: out[name] for name in STATE_NAMES + CACHE_STATE_NAMES}
            log_probs.append(out["log_probs"][0][:out["num_tokens"][0]])
        self.assertAllClose(np.concatenate(log_probs), whole["log_probs"][0], atol=1e-5)

    def test_predict_next_is_the_cached_mixture(self):
        # "zebra" and "gnu" are outside the vocabulary; contexts shorter and longer than W.
        contexts = ["the cat saw a zebra and the zebra saw a gnu and the",
                    "gnu the cat sat on the mat and it was big and red and the dog ran to the",
                    "", "a dog\n", "the"]
        k = 10
        out = self.call("predict_next", texts=contexts, k=k)
        for row, context in enumerate(contexts):
            expected = reference_next_word(self.model, self.vocab, context, WINDOW, THETA,
                                           LAMBDA)
            self.assertAllClose(sum(expected.values()), 1.0, atol=1e-5)
            top = sorted(expected.values(), reverse=True)[:k]
            self.assertAllClose(out["top_probs"][row], top, atol=1e-5)
            for word, prob in zip(out["top_words"][row].astype(str), out["top_probs"][row],
                                  strict=True):
                self.assertAllClose(expected[word], prob, atol=1e-5)
        # A word outside the vocabulary is copied by the cache too, under an id >= V.
        self.assertIn("zebra", list(out["top_words"][0].astype(str)))

    def test_predict_next_equals_score_of_every_next_word(self):
        # For a context in the vocabulary, P(next = w) from predict_next is exp(log_prob) of w
        # scored after that context: the two signatures serve one distribution.
        context = "the cat sat on the mat and the dog saw the cat and it ran to the"
        ids = self.vocab.encode(reference_tokens(context, finish_last_line=False))
        vocab_size = len(self.vocab)
        candidates = np.concatenate([np.tile(ids, [vocab_size, 1]),
                                     np.arange(vocab_size)[:, None]], axis=1).astype(np.int32)
        scored = self.call("score", token_ids=candidates,
                           lengths=[len(ids) + 1] * vocab_size)["log_probs"][:, -1]
        out = self.call("predict_next", texts=[context], k=vocab_size)
        self.assertAllClose(out["top_probs"][0], np.exp(scored)[out["top_ids"][0]], atol=1e-5)
        self.assertAllClose(out["top_probs"][0].sum(), 1.0, atol=1e-5)

    def test_bad_cache_inputs_are_named(self):
        state = self.call("initial_state", stream_ids=list(range(1)))
        bad = (
            ("cache_hidden", np.zeros([1, WINDOW], np.float32), r"`cache_hidden` must have rank 3"),
            ("cache_hidden", np.zeros([1, WINDOW, 15], np.float32),
             r"`cache_hidden` must have shape \[batch_size, cache_window=12, hidden_dim=16\]"),
            ("cache_ids", np.zeros([1, WINDOW - 1], np.int32),
             r"`cache_ids` must have shape \[batch_size, cache_window=12\]"),
            ("cache_ids", np.full([1, WINDOW], 24, np.int32),
             r"`cache_ids` holds a token id outside \[0, 24\)"),
            ("cache_mask", np.zeros([2, WINDOW], bool), r"`cache_mask` must have shape"),
            ("cache_mask", np.zeros([1, WINDOW, 1], bool), r"`cache_mask` must have rank 2"),
        )
        for name, value, message in bad:
            for signature, inputs in (("score_text_stream", {"texts": ["the cat"]}),
                                      ("score_stream", {"token_ids": [[2, 3]], "lengths": [2]})):
                with self.subTest(name=name, signature=signature, shape=value.shape):
                    with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message):
                        self.call(signature, **inputs, **{**state, name: value})
        self.call("score_stream", token_ids=[[2, 3]], lengths=[2], **state)  # valid neighbour

    def test_warmup_requests_carry_the_cache_state(self):
        client = LocalClient(self.export_dir)
        names = set()
        for log in warmup.read_warmup_file(
                os.path.join(self.export_dir, "assets.extra", warmup.WARMUP_FILE)):
            request = log.predict_log.request
            inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
            if request.model_spec.signature_name.endswith("stream"):
                self.assertContainsSubset(CACHE_STATE_NAMES, set(inputs))
            self.assertNotEmpty(client.predict(request.model_spec.signature_name, inputs))
            names.add(request.model_spec.signature_name)
        self.assertEqual(names, set(SIGNATURES))

    def test_psmm_score_carries_the_cache(self):
        path = os.path.join(self.tmp, "lines.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(LINES) + "\n")
        whole = self.call("serving_default", texts=["\n".join(LINES)])
        count = int(whole["num_tokens"][0])
        client = LocalClient(self.base)
        with testing.RestServer(client) as server:
            for where in (["--model", self.base], ["--rest", server.url]):
                output = io.StringIO()
                status = score.main(where + ["--input", path, "--format", "json",
                                             "--lines_per_request", "2"], out=output)
                self.assertEqual(status, 0)
                rows = [json.loads(line) for line in output.getvalue().splitlines()]
                log_probs = [p for r in rows[:-1] for p in r["log_probs"]]
                self.assertAllClose(log_probs, whole["log_probs"][0][:count], atol=1e-5)
                self.assertAllClose(rows[-1]["total"]["perplexity"], whole["perplexity"][0],
                                    rtol=1e-5)

    def test_tf1_session_loader(self):
        expected = self.cache_scores(self.vocab.encode(reference_tokens("\n".join(LINES))))
        with testing.tf1_session_signatures(self.export_dir) as run:
            state = run("initial_state", {"stream_ids": list(range(1))})
            log_probs = []
            for chunk in (LINES[:3], LINES[3:]):
                out = run("score_text_stream", {"texts": ["\n".join(chunk) + "\n"], **state})
                state = {name: out[name] for name in STATE_NAMES + CACHE_STATE_NAMES}
                log_probs.append(out["log_probs"][0][:out["num_tokens"][0]])
        self.assertAllClose(np.concatenate(log_probs), expected, atol=1e-5)

    def test_fresh_process_without_psmm_tf(self):
        ids = np.array([[2, 3, 4, 5, 2, 3], [6, 7, 0, 0, 0, 0]], np.int32)
        requests = [
            ("init", self.export_dir, "initial_state", {"stream_ids": list(range(2))}, None),
            ("stream", self.export_dir, "score_stream", {"token_ids": ids, "lengths": [6, 2]},
             "init"),
            ("next", self.export_dir, "predict_next", {"texts": LINES[2:4], "k": 5}, None),
        ]
        fresh = testing.signatures_in_fresh_process(requests, self.tmp)
        self.assertFalse(fresh["psmm_tf_importable"])
        for row, length in enumerate((6, 2)):
            self.assertAllClose(fresh["stream"]["log_probs"][row][:length],
                                self.cache_scores(ids[row, :length]), atol=1e-5)
        self.assertAllClose(fresh["stream"]["cache_hidden"][0, -6:],
                            self.model(self.inputs_of(ids[:1]))["hidden"][0], atol=1e-5)
        here = self.call("predict_next", texts=LINES[2:4], k=5)
        self.assertAllClose(fresh["next"]["top_probs"], here["top_probs"], atol=1e-6)


class InProcessCacheTest(psmm_testing.TestCase):
    """The endpoints without a save: a cache shorter than the pointer's window, and an LSTM."""

    def test_short_cache_and_lstm_predict_next(self):
        vocab_file = testing.write_vocabulary(os.path.join(self.get_temp_dir(), "vocab.txt"))
        vocab = Vocabulary.load(vocab_file)
        contexts = ["the cat saw a zebra and the zebra saw a gnu and the", "his", ""]
        for kind, window in (("psmm", 3), ("lstm", 20)):
            model, _ = testing.tiny_model(kind=kind, seed=11)
            module = ServingModule(NeuralCache(model, window=window, theta=2.0, lam=0.5),
                                   vocab_file)
            self.assertEqual(module.cache, CacheSettings(window, 2.0, 0.5))
            out = module.predict_next({"texts": tf.constant(contexts), "k": tf.constant(6)})
            for row, context in enumerate(contexts):
                expected = reference_next_word(model, vocab, context, window, 2.0, 0.5)
                top = sorted(expected.values(), reverse=True)[:6]
                self.assertAllClose(out["top_probs"][row], top, atol=1e-5)
            if kind == "lstm":  # nothing to point with, but the cache copies "zebra"
                self.assertAllEqual(out["pointer_probs"], np.zeros([3, 6]))
                self.assertIn(b"zebra", list(out["top_words"][0].numpy()))


class CacheFlagsTest(tf.test.TestCase):

    def test_bad_flags_name_the_flag(self):
        common = ["--keras_model=/nonexistent.keras", "--vocab=/nonexistent.txt",
                  "--export_base=/nonexistent"]
        cases = (
            (["--cache_window=0"], r"--cache_window must be an integer >= 1 .*got 0"),
            (["--cache_window=-3"], r"--cache_window must be an integer >= 1"),
            (["--cache_window=2.5"], r"--cache_window"),
            (["--cache_window=5000000"],
             r"--cache_window must be at most 100,000 .*got 5,000,000"),
            (["--cache_window=10", "--cache_theta=-1"],
             r"--cache_theta must be a finite number >= 0 .*got -1.0"),
            (["--cache_window=10", "--cache_theta=nan"], r"--cache_theta must be a finite"),
            (["--cache_window=10", "--cache_lambda=1.5"],
             r"--cache_lambda must be in \[0, 1\) .*got 1.5"),
            # Lambda 1 exported a perplexity of 2e21 (an empty cache).
            (["--cache_window=10", "--cache_lambda=1.0"],
             r"--cache_lambda must be in \[0, 1\) .*probability 0\), got 1.0"),
            (["--cache_window=10", "--cache_lambda=nan"], r"--cache_lambda must be in \[0, 1\)"),
            (["--cache_window=10", "--cache_lambda=-0.1"],
             r"--cache_lambda must be in \[0, 1\) .*got -0.1"),
            (["--cache_theta=0.5"], r"--cache_theta given without --cache_window"),
            (["--cache_lambda=0.2", "--cache_theta=1"],
             r"--cache_theta and --cache_lambda given without --cache_window"),
        )
        for extra, message in cases:
            with self.subTest(flags=extra):
                code, _, stderr = testing.run_export_main(common + extra)
                self.assertEqual(code, 1)
                self.assertRegex(stderr, message)
                self.assertNotIn("Traceback", stderr)

    def test_cache_settings_of_the_flags(self):
        self.assertIsNone(export_saved_model.cache_settings())
        self.assertEqual(export_saved_model.cache_settings(50),
                         CacheSettings(50, export_lib.DEFAULT_CACHE_THETA,
                                       export_lib.DEFAULT_CACHE_LAMBDA))
        self.assertEqual(export_saved_model.cache_settings(5, 0.0, 0.5), CacheSettings(5, 0, 0.5))
        with self.assertRaisesRegex(ValueError, r"window must be an integer >= 1"):
            CacheSettings(0, 0.3, 0.1)


if __name__ == "__main__":
    tf.test.main()
