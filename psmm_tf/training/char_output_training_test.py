"""The character-LSTM output layer on a frozen model: its open-vocabulary evaluation against a
NumPy mixture, window by window against one window, and the word model's numbers against the
Evaluator's; training, resuming and refusing in a run folder."""

import dataclasses
import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from psmm_tf import testing
from psmm_tf import workdir as run_files
from psmm_tf.data.spelling import spell_splits
from psmm_tf.data.vocabulary import Vocabulary
from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.models import CharacterOutputLM, LSTMBackbone, LSTMLanguageModel, PointerSentinelLM
from psmm_tf.training import char_output_training, checkpointing
from psmm_tf.training.char_output_training import CharOutputConfig, _Data, evaluate_char_output

W = 10
VOCAB = ["<unk>", "<eos>"] + [f"w{i}" for i in range(10)]


def _text():
    """40 tokens, a third of them outside the vocabulary, each of those repeated nearby."""
    rng = np.random.default_rng(0)
    words = []
    for k in range(8):
        words += [VOCAB[rng.integers(2, 12)], f"new{k % 3}", VOCAB[rng.integers(2, 12)],
                  f"new{k % 3}", "<eos>"]
    return words


def _data(text, input_length=None):
    vocabulary = Vocabulary(VOCAB)
    output = spell_splits({"test": text}, vocabulary, W)["test"]
    inputs = None if input_length is None else spell_splits({"test": text}, vocabulary,
                                                            input_length)["test"].table
    return _Data(vocabulary.encode(text), output.ids, inputs, output.table, len(VOCAB))


def _model(cls=PointerSentinelLM, backbone=None, **kwargs):
    backbone = LSTMBackbone(vocab_size=len(VOCAB), embedding_dim=8, hidden_dim=8, num_layers=1,
                            seed=1, **(backbone or {}))
    return CharacterOutputLM(cls(backbone, seed=1, **kwargs), units=8, max_word_length=W,
                             seed=2)


class EvaluateCharOutputTest(testing.TestCase):

    def test_open_vocabulary_mixture_is_the_numpy_mixture(self):
        model = _model(window_size=6)
        data = _data(_text())
        n = len(data.ids) - 1
        report = evaluate_char_output(model, data, length=n)  # one window: keys = inputs
        outputs = model(data.ids[None, :n], data.output_table[data.words[1:n + 1]][None])
        attention = np.asarray(outputs["attention"], np.float64)[0]  # (n, n)
        gate = np.asarray(outputs["gate"], np.float64)[0]
        char = np.asarray(outputs["word_log_prob"], np.float64)[0]
        expected = []
        for t in range(n):
            same = data.words[:n] == data.words[t + 1]  # keys holding the target's spelling
            expected.append(np.log(gate[t] * np.exp(char[t]) + attention[t][same].sum()))
        expected = np.array(expected)
        self.assertAllClose(report["open_perplexity"], np.exp(-expected.mean()), rtol=1e-5)
        self.assertAllClose(report["char_perplexity"], np.exp(-char.mean()), rtol=1e-5)
        outside = data.words[1:] >= len(VOCAB)
        self.assertEqual(report["oov_tokens"], int(outside.sum()))
        self.assertGreater(report["oov_tokens"], 10)
        self.assertAllClose(report["oov"]["open_perplexity"],
                            np.exp(-expected[outside].mean()), rtol=1e-5)
        # A word outside the vocabulary seen in the window gets the pointer's mass.
        self.assertLess(report["oov"]["open_perplexity"], report["oov"]["char_perplexity"])

    def test_windows_with_carried_memory_score_as_one_window(self):
        model = _model(window_size=6)
        data = _data(_text())
        whole = evaluate_char_output(model, data, length=len(data.ids))
        for length in (4, 7):
            pieces = evaluate_char_output(model, data, length=length)
            for key in ("word_perplexity", "char_perplexity", "open_perplexity"):
                self.assertAllClose(pieces[key], whole[key], rtol=1e-5, msg=(length, key))
                self.assertAllClose(pieces["oov"][key], whole["oov"][key], rtol=1e-5)

    @testing.skip_unless_tensorflow("the character-output layer's training is TensorFlow's")
    def test_word_perplexity_is_the_evaluators(self):
        for cls, kwargs in ((PointerSentinelLM, {"window_size": 6}), (LSTMLanguageModel, {})):
            model = _model(cls, **kwargs)
            data = _data(_text())
            report = evaluate_char_output(model, data, length=7)
            expected = Evaluator(model.base_model, length=7).evaluate(data.ids).perplexity
            self.assertAllClose(report["word_perplexity"], expected, rtol=1e-5, msg=cls)
            if cls is LSTMLanguageModel:  # no pointer: the character LSTM alone
                self.assertEqual(report["open_perplexity"], report["char_perplexity"])

    def test_a_model_reading_characters_gets_its_own_spelling(self):
        model = _model(window_size=6,
                       backbone={"input_embedding": "chars", "max_word_length": 7})
        model.base_model.set_vocabulary(VOCAB)
        data = _data(_text(), input_length=7)
        spelled = evaluate_char_output(model, data, length=7)
        unknown = data.input_table.copy()
        unknown[len(VOCAB):] = data.input_table[0]  # every new word spelled as <unk>
        unk = evaluate_char_output(model, _Data(data.ids, data.words, unknown,
                                                data.output_table, data.vocab_size), length=7)
        # Reading the new words as <unk> changes the word model's numbers.
        self.assertNotAllClose(spelled["word_perplexity"], unk["word_perplexity"])


class TrainingWindowsTest(testing.TestCase):

    def test_streams_are_contiguous_and_targets_are_the_next_words(self):
        data = _data(_text(), input_length=7)
        batch, steps = 3, 4
        windows = list(char_output_training._training_windows(data, batch, steps))
        n = (len(data.ids) - 1) // batch  # 13 positions per stream: 3 whole windows
        self.assertLen(windows, 3)
        ids = np.concatenate([w[0] for w in windows], axis=1)
        self.assertAllEqual(ids, data.ids[:batch * n].reshape(batch, n)[:, :12])
        for k, (inputs, token_chars, target_chars) in enumerate(windows):
            positions = np.arange(batch)[:, None] * n + k * steps + np.arange(steps)
            self.assertAllEqual(inputs, data.ids[positions])
            self.assertAllEqual(token_chars, data.input_table[data.words[positions]])
            expected = data.output_table[data.words[positions + 1]]
            self.assertAllEqual(target_chars, expected[..., :target_chars.shape[-1]])
            self.assertEqual(expected[..., target_chars.shape[-1]:].sum(), 0)


class ShuffledWordBatchesTest(testing.TestCase):

    def _windows(self, sizes, width=10):
        """Windows whose hidden state row is the word's number and whose spelling starts with
        it (the rest padding up to a per-window width)."""
        start = 0
        for k, size in enumerate(sizes):
            numbers = np.arange(start, start + size)
            chars = np.zeros((size, width + k % 2), np.int32)
            chars[:, 0] = numbers + 1
            chars[:, 1] = 2  # a second character: widths differ between windows
            yield numbers[:, None].astype("float32") * np.ones((1, 3), "float32"), chars
            start += size

    def _batches(self, sizes, per_update, buffer, seed=0):
        return list(char_output_training.shuffled_word_batches(
            self._windows(sizes), per_update, buffer, np.random.default_rng(seed)))

    def test_every_word_once_in_updates_of_the_given_size(self):
        sizes = [7, 7, 7, 7, 5]  # 33 words
        batches = self._batches(sizes, per_update=4, buffer=10)
        numbers = np.concatenate([hidden[:, 0] for hidden, _ in batches]).astype(int)
        self.assertAllEqual(np.sort(numbers), np.arange(33))
        self.assertEqual([len(h) for h, _ in batches], [4] * 8 + [1])
        for hidden, chars in batches:
            # Each word keeps its own spelling, cut to the columns its batch needs.
            self.assertAllEqual(chars[:, 0], hidden[:, 0].astype(int) + 1)
            self.assertEqual(chars.shape[1], 8)  # two characters: trimmed to a multiple of 8
        # Shuffled: not in corpus order.
        self.assertFalse(np.array_equal(numbers, np.arange(33)))

    def test_a_buffer_mixes_only_the_windows_it_holds(self):
        # A buffer of 14 words: the first fill is windows 1-2 (words 0-13), cut into 3 updates
        # of 4 with 2 words left for the next fill.
        batches = self._batches([7, 7, 7, 7], per_update=4, buffer=14)
        first = np.concatenate([h[:, 0] for h, _ in batches[:3]])
        self.assertTrue(np.all(first < 14))
        # One buffer as large as the split: one shuffle over all of it.
        whole = self._batches([7, 7, 7, 7], per_update=4, buffer=1000)
        self.assertTrue(np.any(np.concatenate([h[:, 0] for h, _ in whole[:3]]) >= 14))

    def test_the_same_seed_gives_the_same_updates(self):
        a = self._batches([7, 7, 5], per_update=3, buffer=8, seed=4)
        b = self._batches([7, 7, 5], per_update=3, buffer=8, seed=4)
        c = self._batches([7, 7, 5], per_update=3, buffer=8, seed=5)
        for (ha, ca), (hb, cb) in zip(a, b, strict=True):
            self.assertAllEqual(ha, hb)
            self.assertAllEqual(ca, cb)
        self.assertFalse(np.array_equal(np.concatenate([h for h, _ in a]),
                                        np.concatenate([h for h, _ in c])))


class CharOutputRunTest(testing.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = tempfile.mkdtemp()
        cls.base = str(testing.trained_tiny_run())  # the tests' shared tiny run, read only

    def _config(self, **fields):
        fields = {"units": 16, "epochs": 1, "steps_per_epoch": 40, "max_eval_tokens": 300,
                  **fields}
        return CharOutputConfig(base_workdir=self.base, **fields)

    @testing.skip_unless_tensorflow("the run's trainer is TensorFlow's")
    def test_trains_resumes_and_refuses_another_config(self):
        workdir = f"{self.root}/chars"
        first = char_output_training.run(self._config(), workdir, verbose=0)
        self.assertEqual(first["epochs"], 1)
        history = json.loads((Path(workdir) / run_files.HISTORY_FILE).read_text())
        resumed = char_output_training.run(self._config(epochs=3), workdir, verbose=0)
        later = json.loads((Path(workdir) / run_files.HISTORY_FILE).read_text())
        self.assertEqual(later[0], history[0])  # epoch 1 kept, 2 and 3 trained on it
        self.assertEqual([r["epoch"] for r in later], [1, 2, 3])
        perplexities = [r["valid"]["char_perplexity"] for r in later]
        self.assertLess(perplexities[-1], perplexities[0])  # it learns to spell
        self.assertTrue(all(math.isfinite(p) for p in perplexities))
        self.assertEqual(resumed["epochs"], 3)
        loaded = char_output_training.read_model_file(Path(workdir) / run_files.MODEL_FILE)
        self.assertIsInstance(loaded, CharacterOutputLM)
        self.assertEqual(loaded.char_output.units, 16)
        # The saved model is the best epoch's: it scores the validation text as reported.
        run, splits = char_output_training.load_base(self._config())
        again = evaluate_char_output(loaded, splits["valid"], run.config.train.eval_length,
                                     max_tokens=300)
        self.assertAllClose(again["open_perplexity"], resumed["valid"]["open_perplexity"],
                            rtol=1e-5)
        with self.assertRaisesRegex(ValueError, "another config"):
            char_output_training.run(self._config(units=32), workdir, verbose=0)
        # A history that lost the checkpoint's epochs is refused, not silently shortened.
        history_file = Path(workdir) / run_files.HISTORY_FILE
        history_file.write_text(json.dumps(later[:1]))
        with self.assertRaisesRegex(ValueError, r"lacks the record of epoch\(s\) \[2, 3\]"):
            char_output_training.run(self._config(epochs=3), workdir, verbose=0)
        history_file.write_text(json.dumps(later))
        before = sorted(p.name for p in Path(self.base).iterdir())
        with self.assertRaisesRegex(ValueError, "holds a training run"):
            char_output_training.run(self._config(), self.base, verbose=0)
        self.assertEqual(sorted(p.name for p in Path(self.base).iterdir()), before)

    @testing.skip_unless_tensorflow("the run's trainer is TensorFlow's")
    def test_a_resumed_run_equals_an_unbroken_one(self):
        # Dropout on h and inside the character LSTM: the restored random states must draw the
        # masks the unbroken run draws, the shuffle the same order, Adam the same moments.
        config = self._config(char_dropout=0.3, steps_per_epoch=15)
        unbroken = f"{self.root}/unbroken"
        broken = f"{self.root}/broken"
        char_output_training.run(dataclasses.replace(config, epochs=2), unbroken, verbose=0)
        char_output_training.run(config, broken, verbose=0)
        char_output_training.run(dataclasses.replace(config, epochs=2), broken, verbose=0)
        records = [json.loads((Path(w) / run_files.HISTORY_FILE).read_text())
                   for w in (unbroken, broken)]
        self.assertEqual([r["epoch"] for r in records[1]], [1, 2])
        for one, other in zip(*records, strict=True):
            self.assertAllClose(one["train_word_perplexity"], other["train_word_perplexity"],
                                rtol=1e-6)
            self.assertAllClose(one["valid"]["char_perplexity"],
                                other["valid"]["char_perplexity"], rtol=1e-6)
        # Epoch 2 moved the weights (the comparison is not of two untrained layers).
        self.assertNotAllClose(records[0][0]["valid"]["char_perplexity"],
                               records[0][1]["valid"]["char_perplexity"])
        models = [char_output_training.read_model_file(Path(w) / run_files.MODEL_FILE)
                  for w in (unbroken, broken)]
        for one, other in zip(*(m.char_output.get_weights() for m in models), strict=True):
            self.assertAllClose(one, other, rtol=1e-6, atol=1e-7)
        self.assertEqual([m.char_output.char_dropout for m in models], [0.3, 0.3])
        # Both logged every step once (steps.jsonl), the resumed run's as the unbroken one's.
        steps = [run_files.read_step_losses(w) for w in (unbroken, broken)]
        self.assertEqual(sorted(steps[0]), [(e, s) for e in (0, 1) for s in range(15)])
        self.assertEqual(sorted(steps[0]), sorted(steps[1]))
        self.assertAllClose([steps[0][k] for k in sorted(steps[0])],
                            [steps[1][k] for k in sorted(steps[0])], rtol=1e-6)

    @testing.skip_unless_tensorflow("the run's trainer is TensorFlow's")
    def test_a_checkpoint_of_the_first_keys_resumes_as_an_unbroken_run(self):
        # Checkpoints written before the shared keys held `char_output`, `optimizer` (with the
        # next epoch's learning rate) and `epoch`; one is written here from a finished epoch.
        config = self._config(steps_per_epoch=15, learning_rate=0.05)
        unbroken, old = f"{self.root}/first_keys_unbroken", Path(self.root) / "first_keys"
        char_output_training.run(dataclasses.replace(config, epochs=3), unbroken, verbose=0)
        char_output_training.run(dataclasses.replace(config, epochs=2), old, verbose=0)
        run = char_output_training._CharOutputRun(config, old, verbose=0)
        run.reporter.close()
        run.optimizer.learning_rate = float(run.schedule.learning_rate.numpy())
        shutil.rmtree(old / run_files.CHECKPOINT_DIR)
        (old / run_files.STEPS_FILE).unlink()
        first_keys = tf.train.Checkpoint(char_output=run.model.char_output,
                                         optimizer=run.optimizer,
                                         epoch=tf.Variable(2, dtype=tf.int64))
        checkpointing.make_manager(first_keys, old / run_files.CHECKPOINT_DIR, 2).save(2)
        char_output_training.run(dataclasses.replace(config, epochs=3), old, verbose=0)
        records = [json.loads((Path(w) / run_files.HISTORY_FILE).read_text())
                   for w in (unbroken, old)]
        self.assertEqual([r["epoch"] for r in records[1]], [1, 2, 3])
        for one, other in zip(*records, strict=True):
            self.assertAllClose(one["learning_rate"], other["learning_rate"], rtol=1e-6)
            self.assertAllClose(one["valid"]["open_perplexity"],
                                other["valid"]["open_perplexity"], rtol=1e-5)
        # It is saved under the shared keys from then on.
        latest = tf.train.latest_checkpoint(old / run_files.CHECKPOINT_DIR)
        keys = {name.split("/")[0] for name, _ in tf.train.list_variables(latest)}
        self.assertTrue({"model", "optimizer", "schedule", "progress"} <= keys, keys)
        self.assertNotIn("char_output", keys)

    @testing.skip_unless_tensorflow("the run's trainer is TensorFlow's")
    def test_a_split_without_a_window_is_refused_writing_nothing(self):
        # Refused before char_output.json is written: the corrected command is not refused as
        # a run of another config.
        workdir = Path(self.root) / "no_window"
        with self.assertRaisesRegex(ValueError, "holds no window of batch_size x num_predicted"):
            char_output_training.run(self._config(batch_size=100_000), workdir, verbose=0)
        self.assertFalse(workdir.exists())
        first = char_output_training.run(self._config(steps_per_epoch=2), workdir, verbose=0)
        self.assertEqual(first["epochs"], 1)

    def test_bad_settings_are_refused(self):
        for field, value in (("units", 0), ("max_word_length", 2), ("dropout", 1.0),
                             ("char_dropout", 1.0),
                             ("learning_rate", 0.0), ("epochs", 0), ("max_eval_tokens", 1),
                             ("words_per_update", 0), ("shuffle_words", 0)):
            with self.subTest(field=field), self.assertRaisesRegex(ValueError, field):
                CharOutputConfig(base_workdir="/runs/x", **{field: value})

    def test_a_folder_without_a_run_is_named(self):
        with self.assertRaisesRegex(ValueError, "config.json"):
            char_output_training.load_base(CharOutputConfig(base_workdir=self.root))


if __name__ == "__main__":
    tf.test.main()
