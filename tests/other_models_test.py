"""End to end through the trainer: the seed papers' options (issue 6) on the synthetic corpus."""

import math

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from train_testlib import tiny_config

from psmm_tf.data import Vocabulary, evaluation_windows, load_splits
from psmm_tf.evaluation import cache_grid_search
from psmm_tf.training import train_lib


class OtherModelsTest(tf.test.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(
        ("pointer_softmax", {"kind": "pointer_softmax"}),
        ("psmm_sampled_softmax", {"kind": "psmm", "softmax": "sampled", "num_sampled": 64}),
        ("lstm_cnn_softmax", {"kind": "lstm", "softmax": "cnn", "num_sampled": 64}),
        ("psmm_char_inputs", {"kind": "psmm", "input_embedding": "chars"}),
    )
    def test_trains_evaluates_and_reloads(self, model_fields):
        workdir = self.get_temp_dir() + "/" + self._testMethodName
        config = tiny_config(steps_per_epoch=6).replace(model=model_fields)
        results = train_lib.run(config, workdir, verbose=0)
        self.assertTrue(math.isfinite(results["test_perplexity"]))
        model = keras.saving.load_model(workdir + "/model.keras")
        self.assertEqual(model.softmax, model_fields.get("softmax", "full"))
        self.assertEqual(model.input_embedding, model_fields.get("input_embedding", "ids"))
        vocabulary = Vocabulary.load(workdir + "/vocab.txt")
        self.assertEqual(model.vocab_size, len(vocabulary))

    def test_neural_cache_on_a_trained_lstm(self):
        workdir = self.get_temp_dir() + "/lstm"
        train_lib.run(tiny_config(steps_per_epoch=6).replace(model={"kind": "lstm"}), workdir,
                      verbose=0)
        model = keras.saving.load_model(workdir + "/model.keras")
        vocabulary = Vocabulary.load(workdir + "/vocab.txt")
        data_dir = workdir + "/synthetic_data"  # where the trainer wrote the corpus
        splits = load_splits(data_dir, "text")
        ids = vocabulary.encode(splits["valid"][:400])
        windows = list(evaluation_windows(ids, batch_size=1, length=50).as_numpy_iterator())
        search = cache_grid_search(model, windows, thetas=[0.1, 0.5], lambdas=[0.0, 0.1, 0.3],
                                   window=20)
        results = {(e["theta"], e["lambda"]): e["perplexity"] for e in search["grid"]}
        best = (search["best"]["theta"], search["best"]["lambda"])
        self.assertLen(results, 6)
        self.assertAlmostEqual(results[(0.1, 0.0)], results[(0.5, 0.0)], places=3)
        self.assertTrue(all(np.isfinite(list(results.values()))))
        # On text built of repeated names the cache helps: the best pair mixes it in.
        self.assertGreater(best[1], 0.0)
        self.assertLess(results[best], results[(0.1, 0.0)])


if __name__ == "__main__":
    tf.test.main()
