"""Tests of the neural cache against a NumPy loop over Grave et al.'s equations."""

import numpy as np
import tensorflow as tf
from keras import ops

from psmm_tf import testing
from psmm_tf.evaluation.neural_cache import NeuralCache, cache_grid_search
from psmm_tf.models import LSTMLanguageModel, PointerSentinelLM

VOCAB = 9  # small, so that words recur and the cache has matches


class NeuralCacheTest(testing.TestCase):

    def _model(self, cls=LSTMLanguageModel):
        return testing.language_model(cls, vocab_size=VOCAB, embedding_dim=5, hidden_dim=6,
            num_layers=1, window_size=4, seed=3)

    def test_streamed_pieces_match_the_equations_from_the_first_token(self):
        model = self._model()
        text = self.rng.integers(0, VOCAB, size=(1, 21)).astype("int32")
        inputs, targets = text[:, :-1], text[:, 1:]
        model_log_probs = ops.convert_to_numpy(
            model.score_with_state(inputs, targets)["log_probs"])[0]
        hidden = ops.convert_to_numpy(model(inputs, memory=model.empty_memory(1))["hidden"])[0]
        expected = testing.reference_cache_log_probs(model_log_probs, hidden, targets[0],
                                                     theta=0.7, lam=0.3, window=6)
        cache = NeuralCache(model, window=6, theta=0.7, lam=0.3)
        state = memory = cache_state = None
        pieces = []
        for start, end in ((0, 4), (4, 13), (13, 20)):
            out = cache.score(inputs[:, start:end], targets[:, start:end], state=state,
                              memory=memory, cache=cache_state)
            state, memory, cache_state = out["state"], out["memory"], out["cache"]
            pieces.append(ops.convert_to_numpy(out["log_probs"])[0])
        actual = np.concatenate(pieces)
        self.assertAllClose(actual, expected, atol=1e-5)
        self.assertEqual(actual[0], model_log_probs[0])  # no history yet
        self.assertNotAllClose(actual[1:], model_log_probs[1:])  # used from the 2nd token

    def test_wraps_a_pointer_model_and_lambda_zero_is_the_model(self):
        model = self._model(PointerSentinelLM)
        text = self.rng.integers(0, VOCAB, size=(2, 9)).astype("int32")
        plain = model.score_with_state(text[:, :-1], text[:, 1:])["log_probs"]
        cached = NeuralCache(model, window=5, lam=0.0).score(text[:, :-1], text[:, 1:])
        self.assertAllClose(cached["log_probs"], plain, atol=1e-6)

    def test_grid_search_matches_direct_scoring(self):
        model = self._model()
        text = self.rng.integers(0, VOCAB, size=(1, 25)).astype("int32")
        windows = []
        for start in range(0, 24, 8):
            windows.append({
                "token_ids": text[:, start:start + 8], "targets": text[:, start + 1:start + 9],
                "token_mask": np.ones((1, 8), bool), "target_weights": np.ones((1, 8), "float32"),
            })
        search = cache_grid_search(model, windows, thetas=[0.1, 1.0], lambdas=[0.0, 0.4],
                                   window=5)
        results = {(e["theta"], e["lambda"]): e["perplexity"] for e in search["grid"]}
        best = (search["best"]["theta"], search["best"]["lambda"])
        direct = {}
        for theta in (0.1, 1.0):
            for lam in (0.0, 0.4):
                scores = NeuralCache(model, window=5, theta=theta, lam=lam).score(
                    text[:, :-1], text[:, 1:])
                direct[(theta, lam)] = np.exp(-np.mean(scores["log_probs"]))
        for pair, perplexity in direct.items():
            self.assertAllClose(results[pair], perplexity, rtol=1e-5, msg=str(pair))
        self.assertAlmostEqual(results[(0.1, 0.0)], results[(1.0, 0.0)], places=4)
        # The best pair of one-by-one scoring, not of the grid's own numbers.
        self.assertEqual(best, min(direct, key=direct.get))

    def test_rejects_bad_parameters(self):
        model = self._model()
        with self.assertRaisesRegex(ValueError, "window must be an integer >= 1"):
            NeuralCache(model, window=0)
        with self.assertRaisesRegex(ValueError, r"lam must be in \[0, 1\)"):
            NeuralCache(model, lam=1.5)
        with self.assertRaisesRegex(ValueError, "theta must be a finite number >= 0"):
            NeuralCache(model, theta=-1.0)
        with self.assertRaisesRegex(ValueError, "theta must be a finite number >= 0"):
            NeuralCache(model, theta=float("inf"))
        with self.assertRaisesRegex(ValueError, "at least one theta"):
            cache_grid_search(model, [], thetas=[], lambdas=[0.1], window=5)
        with self.assertRaisesRegex(ValueError, "no targets"):
            cache_grid_search(model, [], thetas=[0.1], lambdas=[0.1], window=5)


if __name__ == "__main__":
    tf.test.main()
