"""`PointerSentinelMixture` and `MixtureNLL` in a functional model: the mixture against a
brute-force NumPy loop of eq. 3, and a `.keras` round trip."""

import os

import keras
import numpy as np

from psmm_tf import testing
from psmm_tf.layers import PointerSentinelMixture
from psmm_tf.losses import MixtureNLL

B, T, K, V = 2, 3, 5, 7


def _looped_mixture(logits, attention, gate, key_ids):
    """p(y) = g softmax(logits)(y) + sum_{i: x_i = y} a_i, one word and key at a time."""
    out = np.zeros((B, T, V))
    for b in range(B):
        for t in range(T):
            z = np.exp(logits[b, t] - logits[b, t].max())
            for y in range(V):
                out[b, t, y] = gate[b, t] * z[y] / z.sum() + sum(
                    attention[b, t, i] for i in range(K) if key_ids[b, i] == y)
    return out


def _functional(output_mode="log_probs"):
    inputs = [keras.Input((T, V)), keras.Input((T, K)), keras.Input((T,)),
              keras.Input((K,), dtype="int32")]
    mixture = PointerSentinelMixture(output_mode=output_mode, name="mixture")
    return keras.Model(inputs, mixture(inputs))


class PointerSentinelMixtureTest(testing.TestCase):

    def _inputs(self):
        logits = self.rng.normal(size=(B, T, V)).astype("float32")
        # Attention and gate sum to 1 over the keys and the sentinel (eq. 7-8); repeated ids.
        weights = self.rng.random((B, T, K + 1)).astype("float32")
        weights /= weights.sum(-1, keepdims=True)
        key_ids = self.rng.integers(0, 3, size=(B, K)).astype("int32")
        return [logits, weights[..., :K], weights[..., K], key_ids]

    def test_a_functional_model_computes_eq_3(self):
        inputs = self._inputs()
        expected = _looped_mixture(*inputs)
        self.assertAllClose(expected.sum(-1), np.ones((B, T)), atol=1e-6)
        probs = _functional("probs").predict(inputs, verbose=0)
        self.assertAllClose(probs, expected, atol=1e-6)
        log_p = _functional().predict(inputs, verbose=0)
        self.assertEqual(log_p.shape, (B, T, V))
        self.assertAllClose(np.exp(log_p), expected, atol=1e-6)

    def test_saved_and_loaded_with_its_loss_the_same_numbers(self):
        inputs = self._inputs()
        model = _functional()
        model.compile(loss=MixtureNLL())
        targets = self.rng.integers(0, V, size=(B, T)).astype("int32")
        expected = _looped_mixture(*inputs)
        nll = -np.log(np.take_along_axis(expected, targets[..., None], -1)[..., 0])
        self.assertAllClose(model.evaluate(inputs, targets, verbose=0), nll.mean(), atol=1e-5)
        path = os.path.join(self.get_temp_dir(), "mixture.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
        self.assertIsInstance(loaded.get_layer("mixture"), PointerSentinelMixture)
        self.assertIsInstance(loaded.loss, MixtureNLL)
        self.assertAllClose(loaded.predict(inputs, verbose=0), model.predict(inputs, verbose=0),
                            atol=0)
        self.assertAllClose(loaded.evaluate(inputs, targets, verbose=0), nll.mean(), atol=1e-5)
        weights = np.ones((B, T), "float32")
        weights[1] = 0.0
        per_target = MixtureNLL(reduction="none")(targets, loaded.predict(inputs, verbose=0))
        self.assertAllClose(per_target, nll, atol=1e-5)
        self.assertAllClose(MixtureNLL(reduction="sum")(targets, np.log(expected), weights),
                            nll[0].sum(), atol=1e-5)

    def test_refuses_an_unknown_output(self):
        with self.assertRaisesRegex(ValueError, r"output_mode must be one of \('log_probs', "
                                                r"'probs'\), got 'logits'"):
            PointerSentinelMixture(output_mode="logits")
