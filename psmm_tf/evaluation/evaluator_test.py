"""Exact evaluation: independent of the window length, equal to scoring the text in one piece."""

import math

import numpy as np
from keras import ops

from psmm_tf import configs, testing
from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.models import build_model


def _model(kind, window_size=6):
    config = configs.ModelConfig(kind=kind, vocab_size=23, embedding_dim=8, hidden_dim=8,
                                 num_layers=2, window_size=window_size, input_dropout=0.1,
                                 hidden_dropout=0.1, output_dropout=0.1, zoneout=0.1, seed=3)
    return build_model(config)


class EvaluatorTest(testing.TestCase):
    def setUp(self):
        super().setUp()
        self.ids = np.random.default_rng(0).integers(0, 23, size=61).astype(np.int32)

    def one_piece_log_probs(self, model):
        """-log p of every target with the whole text in one call (no carried state)."""
        out = model.score_with_state(self.ids[None, :-1], self.ids[None, 1:])
        log_probs, gate = ops.convert_to_numpy(out["log_probs"]), ops.convert_to_numpy(out["gate"])
        return -log_probs[0].astype(np.float64), gate[0]

    def test_psmm_perplexity_is_exact_for_any_window_length(self):
        model = _model("psmm")
        expected_nll, expected_gate = self.one_piece_log_probs(model)
        for length in (1, 7, 100):
            result = Evaluator(model, length=length).evaluate(self.ids, collect=True)
            self.assertEqual(result.num_targets, 60)
            self.assertAllClose(result.nll, expected_nll, atol=1e-5)
            self.assertAllClose(result.gate, expected_gate, atol=1e-5)
            self.assertAllClose(result.perplexity, math.exp(expected_nll.mean()), rtol=1e-5)
            self.assertAllClose(result.mean_gate, expected_gate.mean(), atol=1e-6)

    def test_lstm_perplexity_and_max_tokens(self):
        model = _model("lstm")
        expected_nll, _ = self.one_piece_log_probs(model)
        result = Evaluator(model, length=9).evaluate(self.ids, max_tokens=31, collect=True)
        self.assertEqual(result.num_targets, 30)
        self.assertAllClose(result.nll, expected_nll[:30], atol=1e-5)
        self.assertAllClose(result.mean_gate, 1.0)

    def test_attention_rows_cover_the_window(self):
        window = 6
        model = _model("psmm", window)
        positions = [0, 3, 5, 20, 59]
        result = Evaluator(model, length=7).evaluate(self.ids, collect=True,
                                                     attention_positions=positions)
        self.assertEqual(sorted(result.attention), positions)
        for j, entry in result.attention.items():
            first = max(0, j - window + 1)
            self.assertAllEqual(entry["key_ids"], self.ids[first:j + 1])
            # Attention over the window plus the gate is the whole softmax (eq. 7-8).
            self.assertAllClose(entry["weights"].sum() + result.gate[j], 1.0, atol=1e-5)
            # The pointer's mass on the target gives back the mixture probability (eq. 3).
            mass = entry["weights"][entry["key_ids"] == self.ids[j + 1]].sum()
            self.assertLessEqual(mass, math.exp(-result.nll[j]) + 1e-6)


if __name__ == "__main__":
    testing.main()
