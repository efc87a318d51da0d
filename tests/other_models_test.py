"""End to end through the trainer: the seed papers' options on the synthetic corpus."""

import math
import os

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from train_testlib import tiny_config

from psmm_tf.data import Vocabulary, evaluation_windows, load_splits
from psmm_tf.data.corpus_setup import load_corpus
from psmm_tf.evaluation import Evaluator, cache_grid_search
from psmm_tf.testing import trained_tiny_run
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

    def test_character_inputs_read_words_outside_the_vocabulary(self):
        # A text corpus whose rare words (count 1 in train, min_count 2) are <unk> to the ids.
        data_dir = self.get_temp_dir() + "/rare_words"
        os.makedirs(data_dir)
        rng = np.random.default_rng(0)
        common = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran"]
        for split, size in (("train", 3000), ("valid", 600), ("test", 600)):
            words = [common[i] if i < len(common) else f"w{split}{i}{rng.integers(1000)}"
                     for i in rng.integers(0, len(common) + 2, size)]
            with open(f"{data_dir}/{split}.txt", "w") as f:
                f.write(" ".join(words) + "\n")
        config = tiny_config(steps_per_epoch=6).replace(
            model={"input_embedding": "chars", "max_word_length": 12},
            data={"dataset": "text", "data_dir": data_dir, "min_count": 2})
        workdir = self.get_temp_dir() + "/chars_text"
        results = train_lib.run(config, workdir, verbose=0)
        model = keras.saving.load_model(workdir + "/model.keras")
        corpus = load_corpus(config.data, vocabulary=Vocabulary.load(workdir + "/vocab.txt"),
                             max_word_length=12)
        ids, spelling = corpus.ids["test"][:300], corpus.spellings["test"][:300]
        self.assertGreater(np.mean(ids == 0), 0.1)  # many <unk> inputs
        evaluator = Evaluator(model, batch_size=1, length=50)
        spelled = evaluator.evaluate(ids, spelling=spelling, collect=True)
        # The trainer's test number is the spelled one; reading <unk> instead changes the
        # prediction after each such input (the first target read after it: j with ids[j] 0).
        # Six updates teach the model little of either (max 3.6e-4 nats apart at seed 0), but
        # the same inputs give the same numbers to float32 rounding (~1e-6).
        self.assertAlmostEqual(results["test_perplexity"], spelled.perplexity, places=3)
        as_unk = evaluator.evaluate(ids, collect=True)
        after_unk = np.abs(as_unk.nll - spelled.nll)[ids[:-1] == 0]
        self.assertGreater(after_unk.max(), 1e-5)

    def test_neural_cache_on_a_trained_lstm(self):
        workdir = str(trained_tiny_run("lstm"))  # the tests' shared tiny LSTM run, read only
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
