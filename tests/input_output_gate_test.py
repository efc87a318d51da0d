"""End to end: a tiny run trained, then an input-to-output gate trained on it (Takase et al. 2017).

Through `train_lib.run` (train, checkpoint, resume, model.keras), psmm-train's
--input_output_gate_on and psmm-evaluate (with the neural cache) on the gated run.
"""

import contextlib
import io
import json
import math
import re
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from psmm_tf.configs import ExperimentConfig
from psmm_tf.data.vocabulary import Vocabulary
from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.evaluation.trained_run import load_trained_run
from psmm_tf.models import InputOutputGateLM, build_model
from psmm_tf.testing import run_script, snapshot, train_in_process, trained_tiny_run
from psmm_tf.training import reporting, train_lib
from psmm_tf.training.gate_training import input_output_gate_config


def _weights(model):
    return {v.path: v.numpy().copy() for v in model.weights}


class InputOutputGateRunTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.root = Path(tf.compat.v1.test.get_temp_dir()) / "input_output_gate"
        cls.base = trained_tiny_run()  # the tests' shared tiny run: read, never written
        cls.base_bytes = (cls.base / "model.keras").read_bytes()
        cls.base_files = snapshot(cls.base)

    def test_train_resume_reload_and_evaluate(self):
        base_model = keras.saving.load_model(self.base / "model.keras")
        workdir = self.root / "gate"
        config = input_output_gate_config(self.base, embedding_dim=8, steps_per_epoch=6)
        # The model the run starts from: the run seeds Keras, then builds it.
        keras.utils.set_random_seed(config.train.seed)
        initial = _weights(build_model(config.model))
        results = train_lib.run(config, workdir, verbose=0)
        self.assertTrue(math.isfinite(results["test_perplexity"]))
        self.assertEqual(results["global_step"], 6)
        self.assertEqual(Vocabulary.load(workdir / "vocab.txt"),
                         Vocabulary.load(self.base / "vocab.txt"))
        stored = ExperimentConfig.from_json((workdir / "config.json").read_text())
        self.assertEqual(stored.model.base_model, str(self.base.absolute() / "model.keras"))
        self.assertEqual((stored.train.optimizer, stored.train.learning_rate), ("adam", 1e-3))

        # Only the gate changed: the wrapped model holds the base run's weights, bit for bit.
        gated = keras.saving.load_model(workdir / "model.keras")
        self.assertIsInstance(gated, InputOutputGateLM)
        self._assert_same_weights(gated.base_model, base_model)
        trained = _weights(gated)
        gate_paths = {v.path for v in gated.gate.trainable_weights}
        self.assertLen(gate_paths, 3)
        self.assertEqual(list(trained), list(initial))
        for path, value in trained.items():
            if path in gate_paths:
                self.assertNotAllClose(value, initial[path], msg=path)
            elif not path.startswith(gated.gate.name):  # (the gate's dropout counter advances)
                self.assertAllEqual(value, initial[path], msg=path)
        self.assertEqual((self.base / "model.keras").read_bytes(), self.base_bytes)

        # model.keras scores as the run reported.
        run = load_trained_run(workdir)
        ids = run.corpus.ids["test"][:config.train.max_eval_tokens]
        reloaded = Evaluator(gated, length=config.train.eval_length).evaluate(ids)
        self.assertAllClose(reloaded.perplexity, results["test_perplexity"], rtol=1e-6)
        self.assertAllClose(reloaded.perplexity, json.loads(
            (workdir / "results.json").read_text())["test_perplexity"], rtol=1e-6)

        # Resuming with one more epoch continues the run; the base is still untouched.
        results = train_lib.run(config.replace(train={"max_epochs": 2}), workdir, verbose=0)
        self.assertEqual(results["global_step"], 12)
        self.assertEqual([r["epoch"] for r in reporting.read_history(workdir)], [0, 1])
        self._assert_same_weights(keras.saving.load_model(workdir / "model.keras").base_model,
                                  base_model)

        # psmm-evaluate on the gated run, with the neural cache's grid search.
        out = self.root / "report"
        done = run_script("trainers/evaluate.py", [
            f"--workdir={workdir}", "--split=valid", "--max_tokens=200", f"--output_dir={out}",
            "--num_examples=2", "--cache_window=10", "--cache_grid", "--cache_thetas=0.1,0.5",
            "--cache_lambdas=0.1,0.3"])
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertRegex(done.stdout, r"psmm\+input_output_gate valid perplexity [\d.]+ \(199 "
                         r"targets\)")
        metrics = json.loads((out / "metrics.json").read_text())
        cache = metrics["neural_cache"]
        table = {(e["theta"], e["lambda"]): e["perplexity"] for e in cache["search"]["grid"]}
        self.assertLen(table, 4)
        self.assertEqual((cache["theta"], cache["lambda"]), min(table, key=table.get))
        self.assertAllClose(cache["model_perplexity"], metrics["perplexity"], rtol=1e-6)
        printed = re.search(r"neural cache valid perplexity ([\d.]+)", done.stdout).group(1)
        self.assertAllClose(float(printed), cache["perplexity"], atol=0.006)
        self.assertEqual(snapshot(self.base), self.base_files)

    def _assert_same_weights(self, model, expected):
        for weight, reference in zip(model.weights, expected.weights, strict=True):
            self.assertEqual(weight.path, reference.path)
            self.assertAllEqual(weight.numpy(), reference.numpy(), msg=weight.path)

    def test_psmm_train_flag(self):
        workdir = self.root / "gate_flag"
        with contextlib.redirect_stdout(io.StringIO()) as stdout:  # psmm-train, in this process
            code, stderr = train_in_process([
                f"--input_output_gate_on={self.base}", f"--workdir={workdir}",
                "--gate_embedding_dim=6", "--gate_dropout=0.3", "--steps_per_epoch=3",
                "--max_eval_tokens=100", "--verbose=0"])
        self.assertEqual(code, 0, stderr[-3000:])
        self.assertRegex(stdout.getvalue(),
                         r"best valid perplexity [\d.]+, test perplexity [\d.]+")
        stored = ExperimentConfig.from_json((workdir / "config.json").read_text())
        self.assertEqual((stored.model.gate_embedding_dim, stored.model.gate_dropout), (6, 0.3))
        self.assertEqual((stored.train.optimizer, stored.train.learning_rate), ("adam", 1e-3))
        self.assertEqual(stored.train.max_epochs, 1)  # the base run's
        history = reporting.read_history(workdir)
        self.assertLen(history, 1)
        self.assertEqual(history[0]["learning_rate"], 1e-3)
        gated = keras.saving.load_model(workdir / "model.keras")
        self.assertEqual(gated.gate.embedding_dim, 6)
        self.assertTrue(np.isfinite(history[0]["valid_perplexity"]))
        self.assertEqual(snapshot(self.base), self.base_files)


if __name__ == "__main__":
    tf.test.main()
