"""The neural cache on trained runs (`cache_metrics`) against a NumPy loop over Grave et al.'s
equations."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from psmm_tf import configs
from psmm_tf.data import Vocabulary, evaluation_windows
from psmm_tf.data.corpus_setup import Corpus
from psmm_tf.data.spelling import spell_splits
from psmm_tf.evaluation import pointer_diagnostics
from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.evaluation.neural_cache import (
    CacheSettings,
    cache_grid_search,
    cache_metrics,
    format_cache_metrics,
)
from psmm_tf.evaluation.trained_run import TrainedRun, load_trained_run
from psmm_tf.models import build_model, registry
from psmm_tf.testing import trained_tiny_run

NUM_TOKENS = 61  # 60 targets, read in windows of 7 so the cache crosses window boundaries


def reference_perplexities(model, ids, window, theta, lam):
    """Perplexity without and with the cache, one target and one cache entry at a time.

    The model's own outputs on the whole text in one call: `log p_model(y_t)` from `score` and
    the top layer's `h_t`. Then (Grave et al. eq. 2, 4), for target t:
    p_cache(y_t) = sum_{i in [t-W, t), y_i = y_t} exp(theta h_t.h_i) / sum_{i in [t-W, t)} ...
    and p = (1 - lam) p_model + lam p_cache, except at t = 0 (no history): p = p_model.
    """
    inputs, targets = ids[None, :-1], ids[None, 1:]
    model_log_probs = model.score_with_state(inputs, targets)["log_probs"].numpy()[0].astype(
        np.float64)
    hidden = model(inputs, memory=model.empty_memory(1))["hidden"].numpy()[0].astype(np.float64)
    nll = []
    for t in range(len(targets[0])):
        p_model = math.exp(model_log_probs[t])
        history = range(max(0, t - window), t)
        if not history:
            nll.append(-math.log(p_model))
            continue
        scores = [math.exp(theta * float(hidden[t] @ hidden[i])) for i in history]
        p_cache = sum(s for s, i in zip(scores, history) if targets[0, i] == targets[0, t])
        p_cache /= sum(scores)
        nll.append(-math.log((1 - lam) * p_model + lam * p_cache))
    return math.exp(-model_log_probs.mean()), math.exp(np.mean(nll))


class CacheMetricsTest(tf.test.TestCase, parameterized.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # The tests' shared tiny runs (read, never written), one of each kind.
        cls.workdirs = {kind: trained_tiny_run(kind) for kind in registry.model_kinds()}

    @parameterized.parameters(*registry.model_kinds())
    def test_matches_the_equations_token_by_token(self, kind):
        run = load_trained_run(self.workdirs[kind])
        ids = run.corpus.ids["valid"][:NUM_TOKENS]
        for window, theta, lam in ((5, 0.7, 0.3), (100, 0.2, 0.9)):
            result = cache_metrics(CacheSettings(window, theta, lam), "valid",
                                   workdir=self.workdirs[kind], max_tokens=NUM_TOKENS, length=7)
            model_ppl, cache_ppl = reference_perplexities(run.model, ids, window, theta, lam)
            self.assertEqual(result["num_targets"], NUM_TOKENS - 1)
            self.assertAllClose(result["model_perplexity"], model_ppl, rtol=2e-6)
            self.assertAllClose(result["perplexity"], cache_ppl, rtol=2e-6)
            self.assertNotAllClose(result["perplexity"], model_ppl, rtol=1e-3)  # it is used
        exact = Evaluator(run.model, length=7).evaluate(ids)
        self.assertAllClose(result["model_perplexity"], exact.perplexity, rtol=1e-6)

    def test_grid_search_best_is_the_tables_argmin(self):
        workdir = self.workdirs["psmm"]
        thetas, lambdas = (0.0, 0.5, 2.0), (0.0, 0.2, 0.6)
        result = cache_metrics(CacheSettings(6, search=True, thetas=thetas, lambdas=lambdas),
                               "valid", workdir=workdir, max_tokens=NUM_TOKENS, length=9)
        search = result["search"]
        table = np.array([entry["perplexity"] for entry in search["grid"]]).reshape(3, 3)
        self.assertEqual([(e["theta"], e["lambda"]) for e in search["grid"]],
                         [(t, lam) for t in thetas for lam in lambdas])
        i, j = np.unravel_index(np.argmin(table), table.shape)
        self.assertEqual((search["best"]["theta"], search["best"]["lambda"]),
                         (thetas[i], lambdas[j]))
        self.assertEqual(search["best"]["perplexity"], table.min())
        # lambda = 0 is the model alone, whatever theta.
        self.assertAllClose(table[:, 0], [search["model_perplexity"]] * 3, rtol=1e-6)
        direct = cache_metrics(CacheSettings(6, thetas[i], lambdas[j]), "valid",
                               workdir=workdir, max_tokens=NUM_TOKENS, length=9)
        self.assertAllClose(direct["perplexity"], table.min(), rtol=1e-6)
        self.assertEqual(result["perplexity"], direct["perplexity"])

    def test_cache_metrics_chooses_on_valid_and_applies_to_the_split(self):
        workdir = self.workdirs["lstm"]
        settings = CacheSettings(window=8, search=True, thetas=(0.1, 1.0), lambdas=(0.1, 0.4))
        result = cache_metrics(settings, "test", workdir=workdir, max_tokens=NUM_TOKENS,
                               length=16)
        best = result["search"]["best"]
        self.assertEqual(result["search"]["split"], "valid")
        self.assertEqual((result["split"], result["theta"], result["lambda"]),
                         ("test", best["theta"], best["lambda"]))
        direct = cache_metrics(CacheSettings(8, best["theta"], best["lambda"]), "test",
                               workdir=workdir, max_tokens=NUM_TOKENS)
        self.assertAllClose(result["perplexity"], direct["perplexity"], rtol=1e-6)
        self.assertIn("best: theta", format_cache_metrics(result))

    def test_rejects_bad_parameters(self):
        cases = [({"window": 0}, r"window must be an integer >= 1 .*got 0"),
                 ({"window": 5, "theta": -0.1}, r"theta must be a finite number >= 0 .*got -0.1"),
                 ({"window": 5, "theta": float("inf")}, r"theta must be a finite number"),
                 ({"window": 5, "lam": 1.5}, r"lambda must be in \[0, 1\) .*got 1.5"),
                 ({"window": 5, "search": True, "lambdas": (0.1, -1.0)},
                  r"lambda must be in \[0, 1\) .*got -1.0"),
                 ({"window": 5, "search": True, "thetas": ()}, "at least one theta")]
        for kwargs, message in cases:
            with self.subTest(kwargs=kwargs), self.assertRaisesRegex(ValueError, message):
                CacheSettings(**kwargs)
        with self.assertRaisesRegex(ValueError, r"lambda must be in \[0, 1\) .*got -0.5"):
            cache_grid_search(load_trained_run(self.workdirs["lstm"]).model, [], [0.3], [-0.5],
                              window=5)


class SpelledWordsTest(tf.test.TestCase):
    """A model with character inputs reads words outside its vocabulary from their spelling in
    the cache's and the pointer diagnostics' passes too: the same model perplexity as the
    evaluator's spelled pass."""

    WORDS = ["<unk>", "<eos>", "the", "cat", "sat", "on", "mat", "a"]
    TEXT = "the dog sat on a mat <eos> a cow sat on the cat <eos> the dog sat on the cow <eos>"

    def setUp(self):
        super().setUp()
        config = dataclasses.replace(configs.get_preset("tiny").model, seed=4,
                                     vocab_size=len(self.WORDS), input_embedding="chars",
                                     max_word_length=10)
        self.model = build_model(config)
        self.model.set_vocabulary(self.WORDS)
        vocabulary = Vocabulary(self.WORDS)
        tokens = (self.TEXT.split() * 3)[:NUM_TOKENS]
        self.ids = np.asarray(vocabulary.encode(tokens), np.int32)
        self.spelling = spell_splits({"valid": tokens}, vocabulary, 10)["valid"]
        self.exact = Evaluator(self.model, length=7).evaluate(self.ids, spelling=self.spelling)
        unspelled = Evaluator(self.model, length=7).evaluate(self.ids)
        self.assertNotAllClose(self.exact.perplexity, unspelled.perplexity, rtol=1e-4)
        preset = configs.get_preset("tiny")
        self.config = dataclasses.replace(
            preset, model=config, train=dataclasses.replace(preset.train, eval_length=7))

    def test_cache_metrics_and_grid_read_the_spelling(self):
        corpus = Corpus(vocabulary=Vocabulary(self.WORDS), ids={"valid": self.ids},
                        train_counts=np.zeros(len(self.WORDS), np.int64), data_dir=Path("."),
                        spellings={"valid": self.spelling})
        run = TrainedRun(config=self.config, corpus=corpus, model=self.model, source="memory")
        result = cache_metrics(CacheSettings(5, 0.7, 0.3), "valid", run=run)
        self.assertAllClose(result["model_perplexity"], self.exact.perplexity, rtol=1e-5)
        windows = evaluation_windows(self.ids, batch_size=1, length=7, spelling=self.spelling)
        grid = cache_grid_search(self.model, windows, [0.5], [0.0], window=5)
        self.assertAllClose(grid["model_perplexity"], self.exact.perplexity, rtol=1e-5)

    def test_pointer_diagnostics_read_the_spelling(self):
        result = pointer_diagnostics.pointer_diagnostics(self.model, self.ids, length=7,
                                                         spelling=self.spelling)
        self.assertAllClose(result["model_log_ppl"], math.log(self.exact.perplexity),
                            rtol=1e-5)


if __name__ == "__main__":
    tf.test.main()
