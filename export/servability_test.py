"""The export is servable on a CPU with no Python (no XLA, cuDNN-only or py_func ops), and it
works as a layer of a new Keras model (`keras.layers.TFSMLayer`)."""

import tempfile

import keras
import numpy as np
import tensorflow as tf

from psmm_tf.export import testing


class ServabilityTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.model, cls.vocab_file, cls.export_dir = testing.shared_export()

    def test_export_has_no_forbidden_ops(self):
        self.assertEqual(testing.servability_problems(self.export_dir), [])

    def test_the_check_finds_py_func_and_xla(self):
        module = tf.Module()
        module.py = tf.function(lambda x: tf.py_function(np.square, [x], tf.float32),
                                input_signature=[tf.TensorSpec([None], tf.float32)])
        module.xla = tf.function(lambda x: x * 2.0, jit_compile=True,
                                 input_signature=[tf.TensorSpec([None], tf.float32)])
        path = tempfile.mkdtemp()
        tf.saved_model.save(module, path, signatures={"py": module.py, "xla": module.xla})
        problems = "\n".join(testing.servability_problems(path))
        self.assertIn("forbidden op EagerPyFunc", problems)
        self.assertIn("_XlaMustCompile=True", problems)

    def test_tfsm_layer_in_a_new_keras_model(self):
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        lengths = keras.Input(shape=(), dtype="int32", name="lengths")
        scores = keras.layers.TFSMLayer(self.export_dir, call_endpoint="score", trainable=False)(
            {"token_ids": token_ids, "lengths": lengths})
        # A new head on the served scores: mean negative log-likelihood per token.
        nll = keras.layers.Lambda(
            lambda s: -s["log_likelihood"] / keras.ops.cast(s["num_tokens"], "float32"))(scores)
        pipeline = keras.Model({"token_ids": token_ids, "lengths": lengths},
                               {"nll": nll, "log_probs": scores["log_probs"]})
        ids = np.array([[2, 3, 4, 5, 6], [7, 8, 9, 0, 0]], np.int32)
        result = pipeline.predict({"token_ids": ids, "lengths": np.array([5, 3], np.int32)},
                                  verbose=0)
        for row, length in enumerate((5, 3)):
            inputs = np.concatenate([[[1]], ids[row:row + 1, :length - 1]], axis=1)
            expected = self.model.score_with_state(
                inputs, ids[row:row + 1, :length])["log_probs"][0]
            self.assertAllClose(result["log_probs"][row][:length], expected, atol=1e-5)
            self.assertAllClose(result["nll"][row], -np.mean(expected), atol=1e-5)
