"""Gate calibration: the fit recovers known parameters; a calibrated model scores as fitted."""

import math
import tempfile

import keras
import numpy as np
import tensorflow as tf

from psmm_tf.configs import ModelConfig
from psmm_tf.evaluation import gate_calibration
from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.models import build_model

V, D, L = 13, 8, 5


def _sampled_records(scale, bias, n=20000, seed=0):
    """Targets drawn from the eq. 3 mixture whose gate is sigmoid(scale * l + bias), with the
    model's recorded gate sigmoid(l): the fit should find (scale, bias) back."""
    rng = np.random.default_rng(seed)
    vocab_size = 50
    logit = rng.normal(1.0, 2.0, n)
    true_gate = 1.0 / (1.0 + np.exp(-(scale * logit + bias)))
    p_vocab = rng.dirichlet(np.full(vocab_size, 0.3), n)  # the softmax of each position
    r = np.zeros((n, vocab_size))  # the pointer: its mass on 3 words of the window
    for row in range(n):
        r[row, rng.choice(vocab_size, 3, replace=False)] = rng.dirichlet(np.ones(3))
    mixture = true_gate[:, None] * p_vocab + (1.0 - true_gate[:, None]) * r
    targets = np.array([rng.choice(vocab_size, p=row / row.sum()) for row in mixture])
    rows = np.arange(n)
    gate = 1.0 / (1.0 + np.exp(-logit))
    mass = (1.0 - gate) * r[rows, targets]
    return {"gate": gate, "vocab_log_prob": np.log(p_vocab[rows, targets]),
            "pointer_mass": mass,
            "log_prob": np.log(gate * p_vocab[rows, targets] + mass)}


def _model(gate_calibration=None):
    config = ModelConfig(kind="psmm", vocab_size=V, embedding_dim=D, hidden_dim=D, num_layers=1,
                         window_size=L, input_dropout=0.0, hidden_dropout=0.0,
                         output_dropout=0.0, zoneout=0.0, seed=3)
    model = build_model(config)
    model.set_gate_calibration(gate_calibration)
    return model


def _repetitive_text(n=400, seed=0):
    """Text where the next word is often a recent one: the pointer has something to do."""
    rng = np.random.default_rng(seed)
    ids = list(rng.integers(0, V, 4))
    while len(ids) < n:
        ids.append(ids[-rng.integers(1, 4)] if rng.random() < 0.6 else rng.integers(0, V))
    return np.asarray(ids)


class FitTest(tf.test.TestCase):
    def test_recovers_the_gate_that_generated_the_targets(self):
        for scale, bias in ((0.4, 0.5), (1.0, 0.0), (1.5, -1.0)):
            fit = gate_calibration.fit_gate_calibration(_sampled_records(scale, bias))
            self.assertAllClose(fit["scale"], scale, atol=0.1)
            self.assertAllClose(fit["bias"], bias, atol=0.2)
            self.assertLessEqual(fit["log_ppl_after"], fit["log_ppl_before"])

    def test_reported_nll_is_the_mixture_nll_at_the_fit(self):
        records = _sampled_records(0.5, 0.3, n=3000)
        fit = gate_calibration.fit_gate_calibration(records)
        gate = 1.0 / (1.0 + np.exp(-(fit["scale"] * np.log(records["gate"] / (1 - records["gate"]))
                                     + fit["bias"])))
        r = records["pointer_mass"] / (1.0 - records["gate"])
        expected = -np.mean(np.log(gate * np.exp(records["vocab_log_prob"]) + (1 - gate) * r))
        self.assertAllClose(fit["log_ppl_after"], expected, rtol=1e-10)
        self.assertAllClose(fit["log_ppl_before"], -np.mean(records["log_prob"]))
        self.assertEqual(fit["num_targets"], 3000)

    def test_rejects_empty_records(self):
        empty = {key: np.zeros(0) for key in ("gate", "vocab_log_prob", "pointer_mass",
                                              "log_prob")}
        with self.assertRaisesRegex(ValueError, "at least one target"):
            gate_calibration.fit_gate_calibration(empty)

    def test_compose(self):
        # (2, 1) then (0.5, -1): 0.5 (2 l + 1) - 1 = l - 0.5.
        self.assertAllClose(gate_calibration.compose((2.0, 1.0), (0.5, -1.0)), (1.0, -0.5))
        self.assertAllClose(gate_calibration.compose(None, (0.5, -1.0)), (0.5, -1.0))


class ModelCalibrationTest(tf.test.TestCase):
    def test_calibrated_model_scores_what_the_fit_reported(self):
        model, ids = _model(), _repetitive_text()
        before = Evaluator(model, length=11).evaluate(ids).perplexity
        fit = gate_calibration.calibrate_gate(model, ids, length=7)
        self.assertEqual(tuple(fit["gate_calibration"]), model.pointer.gate_calibration)
        after = Evaluator(model, length=11).evaluate(ids).perplexity
        self.assertAllClose(math.log(before), fit["log_ppl_before"], rtol=1e-5)
        self.assertAllClose(math.log(after), fit["log_ppl_after"], rtol=1e-5)
        self.assertLess(after, before)

    def test_calibrating_again_composes_with_the_calibration_there(self):
        ids = _repetitive_text()
        fresh = gate_calibration.calibrate_gate(_model(), ids, length=7)
        # A model already calibrated (badly) ends at the same calibration of its trained gate.
        again = gate_calibration.calibrate_gate(_model((3.0, -2.0)), ids, length=7)
        self.assertAllClose(fresh["log_ppl_after"], again["log_ppl_after"], atol=2e-4)

    def test_calibration_travels_in_the_keras_file(self):
        model, ids = _model((0.4, 0.8)), _repetitive_text(120)
        expected = Evaluator(model, length=11).evaluate(ids).perplexity
        with tempfile.TemporaryDirectory() as tmp:
            model.save(f"{tmp}/model.keras")
            loaded = keras.saving.load_model(f"{tmp}/model.keras")
        self.assertEqual(loaded.pointer.gate_calibration, (0.4, 0.8))
        self.assertEqual(loaded.get_config()["gate_calibration"], [0.4, 0.8])
        self.assertAllClose(Evaluator(loaded, length=11).evaluate(ids).perplexity, expected,
                            rtol=1e-6)
        self.assertNotAllClose(Evaluator(_model(), length=11).evaluate(ids).perplexity,
                               expected, rtol=1e-3)


if __name__ == "__main__":
    tf.test.main()
