"""tf.train.Checkpoint(model=...) must hold every variable of every model, RNG states included.

The layers keep their RNG states in Keras `SeedGenerator`s, which TensorFlow's checkpoints do
not see; `checkpointing.track_random_states` makes them visible (the trainer calls it).
"""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from psmm_tf import testing
from psmm_tf.models import InputOutputGateLM, LSTMLanguageModel, PointerSentinelLM
from psmm_tf.training.checkpointing import track_random_states


def _model(cls, softmax="full"):
    # Uncompiled, as psmm-train builds them (a compiled model also checkpoints its optimizer).
    model = testing.language_model(cls, vocab_size=12, embedding_dim=4, hidden_dim=4,
                                   num_layers=2, window_size=3, zoneout=0.2, seed=1,
                                   softmax=softmax, max_word_length=5, compile=False)
    model.set_vocabulary([f"w{i}" for i in range(12)])
    return track_random_states(model)


class CheckpointTest(testing.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("psmm", PointerSentinelLM, "full"), ("lstm", LSTMLanguageModel, "full"),
        ("psmm_cnn", PointerSentinelLM, "cnn"), ("psmm_sampled", PointerSentinelLM, "sampled"),
    )
    def test_checkpoint_under_model_restores_every_variable(self, cls, softmax):
        model = _model(cls, softmax)
        text = self.rng.integers(0, 12, size=(2, 6)).astype("int32")
        model(text, targets=text, training=True)  # advances the RNG states
        _perturb(model)
        path = tf.train.Checkpoint(model=model).save(self.get_temp_dir() + "/ckpt")
        saved = {name for name, _ in tf.train.list_variables(path)}
        self.assertEqual(len([n for n in saved if n.startswith("model/")]),
                         len(model.variables), sorted(saved))
        self._assert_restores(model, _model(cls, softmax), path)

    def test_input_output_gate_checkpoint(self):
        def build():
            return track_random_states(
                InputOutputGateLM(_model(PointerSentinelLM), embedding_dim=3, seed=1))

        model = build()
        _perturb(model)
        path = tf.train.Checkpoint(model=model).save(self.get_temp_dir() + "/iog")
        saved = [n for n, _ in tf.train.list_variables(path) if n.startswith("model/")]
        self.assertEqual(len(saved), len(model.variables))
        self._assert_restores(model, build(), path)

    def _assert_restores(self, model, clone, path):
        """The clone starts elsewhere (the original was perturbed) and ends equal to it."""
        floats = [i for i, v in enumerate(model.variables) if _is_float(v)]
        self.assertTrue(any(
            not np.array_equal(model.variables[i].numpy(), clone.variables[i].numpy())
            for i in floats))
        tf.train.Checkpoint(model=clone).restore(path).assert_existing_objects_matched()
        for original, restored in zip(model.variables, clone.variables, strict=True):
            self.assertAllEqual(original.numpy(), restored.numpy(), original.path)


def _perturb(model):
    """Moves every float variable away from its seeded initial value."""
    rng = np.random.default_rng(0)
    for variable in model.variables:
        if _is_float(variable):
            value = variable.numpy()
            variable.assign(value + rng.normal(0, 0.1, value.shape).astype(value.dtype))


def _is_float(variable):
    return np.issubdtype(np.dtype(str(variable.dtype)), np.floating)


if __name__ == "__main__":
    tf.test.main()
