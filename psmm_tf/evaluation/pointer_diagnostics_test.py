"""Pointer diagnostics on hand-made records and on models whose pointer is set by hand."""

import math
import tempfile

import numpy as np
from keras import ops

from psmm_tf import testing
from psmm_tf.configs import ModelConfig
from psmm_tf.evaluation import pointer_diagnostics as diagnostics
from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.models import build_model
from psmm_tf.testing import reference_cache_log_probs

V, D, L = 13, 8, 5


def _model(seed=3):
    config = ModelConfig(kind="psmm", vocab_size=V, embedding_dim=D, hidden_dim=D, num_layers=1,
                         window_size=L, input_dropout=0.0, hidden_dropout=0.0,
                         output_dropout=0.0, zoneout=0.0, seed=seed)
    return build_model(config)


def _text(n=90, seed=0):
    return np.random.default_rng(seed).integers(0, V, n)


def _records(gate, p_vocab, mass, in_window=None):
    n = len(gate)
    gate, p_vocab, mass = (np.asarray(x, np.float64) for x in (gate, p_vocab, mass))
    return {
        "gate": gate, "vocab_log_prob": np.log(p_vocab), "pointer_mass": mass,
        "log_prob": np.log(gate * p_vocab + mass),
        "in_window": np.ones(n, bool) if in_window is None else np.asarray(in_window),
        "has_history": np.ones(n, bool), "cache_prob": np.zeros((1, n)),
        "thetas": np.array([0.3]), "query_sum": np.zeros(D), "query_square_sum": 1.0 * n,
    }


class PointerStatisticsTest(testing.TestCase):
    def test_gate_offset_of_a_hand_worked_case(self):
        # Half the targets only the softmax can give (p_vocab 0.1, r 0), half only the pointer
        # (p_vocab 0, r 0.5): NLL(g) = -1/2 log(0.1 g) - 1/2 log(0.5 (1 - g)) is lowest at
        # g = 0.5. The model's gate is sigmoid(-1), so the best offset on its logit is +1.
        gate = np.full(4, 1.0 / (1.0 + math.e))
        p_vocab = np.array([0.1, 0.1, 1e-30, 1e-30])
        mass = np.array([0.0, 0.0, 0.5, 0.5]) * (1.0 - gate)
        stats = diagnostics.pointer_statistics(_records(gate, p_vocab, mass))
        self.assertAllClose(stats["gate_offset"], 1.0, atol=1e-6)
        before = -np.mean(np.log(gate * p_vocab + mass))
        after = -0.5 * math.log(0.05) - 0.5 * math.log(0.25)
        self.assertAllClose(stats["gate_offset_log_ppl_gain"], before - after, rtol=1e-6)
        # Precision: half the pointer's mass lands on the target.
        self.assertAllClose(stats["pointer_precision"], 0.25, rtol=1e-6)

    def test_a_saturated_gate_keeps_the_pointer_distribution_a_probability(self):
        # 1 - g underflows in float32 while the attention still holds round-off mass.
        gate = np.array([1.0 - 1e-9, 1.0])
        stats = diagnostics.pointer_statistics(
            _records(gate, np.array([0.01, 0.01]), np.array([1e-7, 1e-8])), lambdas=[0.5])
        self.assertAllClose(stats["attention_as_cache"]["log_ppl"],
                            -np.mean(np.log([0.5 * 0.01 + 0.5, 0.5 * 0.01 + 0.5])))

    def test_gate_in_and_out_of_the_window(self):
        gate = np.array([0.2, 0.4, 0.9, 0.7])
        stats = diagnostics.pointer_statistics(
            _records(gate, np.full(4, 0.1), np.array([0.5, 0.3, 0.0, 0.0]),
                     in_window=[True, True, False, False]))
        self.assertAllClose(stats["gate_target_in_window"], 0.3)
        self.assertAllClose(stats["gate_target_not_in_window"], 0.8)
        self.assertAllClose(stats["fraction_in_window"], 0.5)
        self.assertAllClose(stats["pointer_precision_in_window"], 0.8 / 1.4)

    def test_attention_as_cache_picks_the_best_lambda(self):
        gate = np.full(2, 0.5)
        p_vocab = np.array([0.2, 0.2])
        mass = np.array([0.4, 0.0])  # r = 0.8 and 0
        stats = diagnostics.pointer_statistics(_records(gate, p_vocab, mass), lambdas=[0.0, 0.5])
        # lambda 0.5: -(log 0.5 + log 0.1) / 2; lambda 0: -log 0.2.
        self.assertAllClose(stats["attention_as_cache"]["log_ppl"],
                            min(-(math.log(0.5) + math.log(0.1)) / 2, -math.log(0.2)))


class ModelDiagnosticsTest(testing.TestCase):
    def test_records_agree_with_the_evaluator_and_the_mixture(self):
        model, ids = _model(), _text()
        records = diagnostics.collect_pointer_records(model, ids, length=7, thetas=[0.5])
        exact = Evaluator(model, length=11).evaluate(ids, collect=True)
        self.assertAllClose(-records["log_prob"], exact.nll, atol=1e-5)
        self.assertAllClose(records["gate"], exact.gate, atol=1e-6)
        # Eq. 3: p = g p_vocab + p_ptr, target by target.
        self.assertAllClose(np.exp(records["log_prob"]),
                            records["gate"] * np.exp(records["vocab_log_prob"])
                            + records["pointer_mass"], atol=1e-6)

    def test_grave_cache_matches_the_numpy_reference(self):
        model, ids = _model(), _text()
        records = diagnostics.collect_pointer_records(model, ids, length=7, thetas=[0.5])
        hidden = ops.convert_to_numpy(model(ids[None, :-1], training=False)["hidden"])[0]
        # The NumPy reference at lambda 1 is log p_cache (window L: the pointer's tokens).
        with np.errstate(divide="ignore"):  # log p_cache = -inf where the word is not cached
            expected = reference_cache_log_probs(records["vocab_log_prob"], hidden, ids[1:],
                                                 theta=0.5, lam=1.0, window=L)
        history = records["has_history"]
        self.assertAllClose(records["cache_prob"][0][history], np.exp(expected[history]),
                            atol=1e-5)
        self.assertGreater(np.sum(records["cache_prob"][0] > 0.01), 5)

    def test_a_constant_query_and_a_saturated_gate(self):
        model, ids = _model(), _text()
        pointer = model.pointer
        pointer.query_kernel.assign(np.zeros((D, D), np.float32))
        pointer.query_bias.assign(np.ones(D, np.float32))
        pointer.sentinel.assign(np.full(D, 100.0, np.float32))
        stats = diagnostics.pointer_diagnostics(model, ids, length=7, thetas=[0.5])
        self.assertAllClose(stats["query_constancy"], 1.0, atol=1e-6)
        self.assertAllClose(stats["gate_target_in_window"], 1.0, atol=1e-6)
        self.assertAllClose(stats["gate_target_not_in_window"], 1.0, atol=1e-6)

    def test_query_constancy_of_a_varying_query(self):
        model, ids = _model(), _text()
        kernel = np.random.default_rng(1).normal(0, 30.0, (D, D))
        model.pointer.query_kernel.assign(kernel.astype(np.float32))
        stats = diagnostics.pointer_diagnostics(model, ids, length=7, thetas=[0.5])
        hidden = ops.convert_to_numpy(model(ids[None, :-1], training=False)["hidden"])
        hidden = hidden[0].astype(np.float64)
        query = np.tanh(hidden @ kernel)  # eq. 4, the bias is still zero
        expected = np.sum(query.mean(axis=0) ** 2) / np.mean(np.sum(query ** 2, axis=1))
        self.assertAllClose(stats["query_constancy"], expected, rtol=1e-4)
        self.assertLess(stats["query_constancy"], 0.9)

    def test_a_rebuilt_model_starts_from_the_same_pointer(self):
        first, second = _model(seed=5), _model(seed=5)
        for name, value in diagnostics.pointer_weights(first).items():
            self.assertAllClose(value, diagnostics.pointer_weights(second)[name])
        self.assertNotAllClose(ops.convert_to_numpy(first.pointer.query_kernel),
                               ops.convert_to_numpy(_model(seed=6).pointer.query_kernel))

    def test_weights_moved_from_the_saved_initial_weights(self):
        model = _model()
        path = tempfile.mkdtemp() + "/initial_pointer.npz"
        self.assertIsNone(diagnostics.load_initial_pointer_weights(path))
        diagnostics.save_initial_pointer_weights(model, path)
        initial = diagnostics.load_initial_pointer_weights(path)
        model.pointer.query_kernel.assign(model.pointer.query_kernel * 1.5)
        model.pointer.query_bias.assign(np.full(D, 0.5, np.float32))
        weights = diagnostics.weight_statistics(model, initial)
        self.assertAllClose(weights["query_kernel"]["relative_change"], 0.5, rtol=1e-5)
        self.assertAllClose(weights["query_kernel"]["norm"],
                            1.5 * weights["query_kernel"]["initial_norm"], rtol=1e-5)
        # A zero-initialised bias: the change is its norm.
        self.assertAllClose(weights["query_bias"]["relative_change"], 0.5 * math.sqrt(D))
        self.assertAllClose(weights["sentinel"]["relative_change"], 0.0)

    def test_models_without_a_sentinel_are_refused(self):
        lstm = build_model(ModelConfig(kind="lstm", vocab_size=V, embedding_dim=D, hidden_dim=D,
                                       num_layers=1, window_size=L))
        with self.assertRaisesRegex(ValueError, "sentinel pointer"):
            diagnostics.collect_pointer_records(lstm, _text())


if __name__ == "__main__":
    testing.main()
