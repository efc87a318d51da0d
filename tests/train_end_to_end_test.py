"""End to end: train, checkpoint, resume and evaluate tiny runs on synthetic and real corpora."""

import json
import math
import os
import shutil
import time
import unittest
from unittest import mock

import keras
import tensorflow as tf
from train_testlib import shared_data_dir, tiny_config

from psmm_tf import checkpoints
from psmm_tf import workdir as run_files
from psmm_tf.configs import ExperimentConfig
from psmm_tf.data.corpus import load_splits
from psmm_tf.data.vocabulary import Vocabulary
from psmm_tf.evaluation import pointer_diagnostics, report, trained_run
from psmm_tf.evaluation.evaluator import Evaluator
from psmm_tf.models import LSTMLanguageModel, PointerSentinelLM, build_model
from psmm_tf.testing import snapshot, trained_tiny_run
from psmm_tf.training import checkpointing, reporting, run_setup, train_lib
from psmm_tf.training.steps import TrainStep


class SyntheticRunTest(tf.test.TestCase):
    def test_train_checkpoint_resume_evaluate(self):
        workdir = self.get_temp_dir() + "/psmm"
        config = tiny_config()
        # The run `train_lib.run(config, ...)` writes: the tests' shared one (trained once per
        # process), copied, as its results.json says; resumed below.
        shutil.copytree(trained_tiny_run(), workdir)
        results = json.loads(open(workdir + "/results.json").read())
        self.assertEqual(results["epochs"], 1)
        self.assertEqual(results["global_step"], 12)
        self.assertTrue(math.isfinite(results["test_perplexity"]))

        # The workdir contract the export code relies on.
        stored = ExperimentConfig.from_json(open(workdir + "/config.json").read())
        vocabulary = Vocabulary.load(workdir + "/vocab.txt")
        self.assertEqual(stored.model.vocab_size, len(vocabulary))
        self.assertEqual(stored.model.seed, config.train.seed)
        model, path = run_files.restore_model(stored, vocabulary, workdir + "/checkpoints")
        self.assertEndsWith(path, "ckpt-12")
        best = keras.saving.load_model(workdir + "/model.keras")
        for a, b in zip(model.weights, best.weights, strict=True):
            self.assertAllClose(a, b)  # one epoch: the best model is the last one
        # The gate's calibration, fitted on the validation split, is in model.keras, which
        # scores that split as the fit said; the diagnostics are the trained gate's.
        fit = results["gate_calibration"]
        self.assertEqual(list(best.pointer.gate_calibration), fit["gate_calibration"])
        corpus = trained_run.load_trained_run(workdir).corpus
        valid = Evaluator(best, length=11).evaluate(corpus.ids["valid"][:300])  # run: length 16
        self.assertAllClose(valid.perplexity, results["calibrated_valid_perplexity"], rtol=1e-4)
        self.assertLessEqual(fit["log_ppl_after"], fit["log_ppl_before"])
        self.assertAllClose(fit["log_ppl_before"], results["pointer"]["model_log_ppl"])
        # The test split also with the gate as trained (the paper's model).
        best.set_gate_calibration(None)
        test = Evaluator(best, length=11).evaluate(corpus.ids["test"][:300])
        self.assertAllClose(test.perplexity, results["trained_gate_test_perplexity"], rtol=1e-4)
        self.assertNotAllClose(results["trained_gate_test_perplexity"],
                               results["test_perplexity"], rtol=1e-3)

        # The dropout / zoneout generator states are in the checkpoint under `model`, with their
        # trained values; no other key holds weights.
        names = dict(tf.train.list_variables(path))
        rng_names = [n for n in names if n.startswith("model/") and "rng_checkpoint" in n]
        states = [v for v in model.non_trainable_variables if v.name == "seed_generator_state"]
        self.assertLen(rng_names, 5)  # 2 zoneout layers + 3 locked dropouts of the tiny model
        self.assertLen(states, 5)
        self.assertFalse([n for n in names if n.startswith(("rng/", "weights/"))])
        reader = tf.train.load_checkpoint(path)
        counters = [reader.get_tensor(n)[1] for n in rng_names]
        self.assertTrue(all(c > 0 for c in counters), counters)
        self.assertIn("carry/state/0/0/.ATTRIBUTES/VARIABLE_VALUE", names)
        self.assertIn("progress/step/.ATTRIBUTES/VARIABLE_VALUE", names)

        # Resuming with more epochs continues the step count and the history.
        results = train_lib.run(config.replace(train={"max_epochs": 2}), workdir, verbose=0)
        self.assertEqual(results["global_step"], 24)
        history = reporting.read_history(workdir)
        self.assertEqual([r["epoch"] for r in history], [0, 1])
        self.assertLen(reporting.read_step_losses(workdir), 24)

        # Another model in the same workdir is refused with the differing field named.
        with self.assertRaisesRegex(ValueError, r"model.kind: 'psmm' -> 'lstm'"):
            train_lib.run(config.replace(model={"kind": "lstm"}), workdir, verbose=0)

        # The baseline (the tests' shared tiny LSTM run: this corpus and vocabulary, read
        # only) and the evaluation report (Figure 4 table and chart, attention page).
        baseline = trained_tiny_run("lstm")
        baseline_files = snapshot(baseline)
        out = self.get_temp_dir() + "/report"
        metrics = report.evaluation_report(
            workdir, out, split="test", baseline_workdir=baseline, max_tokens=300,
            num_examples=4)
        self.assertAllClose(metrics["perplexity"], results["test_perplexity"], rtol=1e-6)
        self.assertLen(metrics["frequency_buckets"], 10)
        self.assertEqual(sum(r["num_targets"] for r in metrics["frequency_buckets"]), 299)
        self.assertLen(metrics["attention_positions"], 4)
        page = open(out + "/attention.html").read()
        self.assertEqual(page.count("class='example'"), 4)
        self.assertTrue(open(out + "/frequency_buckets.png", "rb").read(4) == b"\x89PNG")
        self.assertIn("mean difference", open(out + "/frequency_buckets.md").read())
        self.assertEqual(json.load(open(out + "/metrics.json"))["model"], "psmm")
        self.assertEqual(snapshot(baseline), baseline_files)

    def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(self):
        workdir = self.get_temp_dir() + "/nan"
        original = TrainStep.__call__
        calls = []

        def nan_at_step_seven(step, batch, state, memory, **kwargs):
            metrics, state, memory = original(step, batch, state, memory, **kwargs)
            calls.append(1)
            if len(calls) == 7:  # the model saturates rather than overflow: inject the NaN
                metrics = dict(metrics, loss=tf.constant(float("nan")))
            return metrics, state, memory

        with mock.patch.object(TrainStep, "__call__", nan_at_step_seven):
            with self.assertRaisesRegex(
                    train_lib.NonFiniteLossError,
                    r"Training loss is nan at epoch 1, step 7 .*Last good checkpoint: .*ckpt-5"):
                train_lib.run(tiny_config(), workdir, verbose=0)
        self.assertEndsWith(tf.train.latest_checkpoint(workdir + "/checkpoints"), "ckpt-5")
        self.assertLen(reporting.read_step_losses(workdir), 6)  # the NaN step is not logged
        self.assertFalse(tf.io.gfile.exists(workdir + "/model.keras"))
        # The run resumes from the last good checkpoint.
        results = train_lib.run(tiny_config(), workdir, verbose=0)
        self.assertEqual(results["global_step"], 12)

    def test_warmup_scales_the_first_steps_across_a_resume(self):
        # Step k of a 4-step warm-up moves SGD's weights k / 4 as far as without warm-up (the
        # same clipped gradient at step 1, from the same initialisation); the rate logged in
        # steps.jsonl says the same, and a resumed run goes on from where its warm-up stood.
        deltas = {}
        for warmup in (0, 4):
            workdir = self.get_temp_dir() + f"/warmup_{warmup}"
            config = tiny_config(warmup_steps=warmup, steps_per_epoch=1, max_eval_tokens=40,
                                 learning_rate=0.5)
            # finish=False: no final evaluations; the step's checkpoint is what is compared.
            train_lib.run(config, workdir, verbose=0, finish=False)
            stored = ExperimentConfig.from_json(open(workdir + "/config.json").read())
            trained, _ = run_files.restore_model(stored, Vocabulary.load(workdir + "/vocab.txt"),
                                                 workdir + "/checkpoints")
            initial = build_model(stored.model)
            deltas[warmup] = [a.numpy() - b.numpy() for a, b in
                              zip(trained.weights, initial.weights, strict=True)
                              if "seed_generator" not in a.path]
        moved = [tf.norm(d) for d in deltas[0]]
        self.assertGreater(float(tf.reduce_max(moved)), 1e-3)
        for full, warm in zip(deltas[0], deltas[4], strict=True):
            self.assertAllClose(warm, 0.25 * full, atol=1e-6)

        workdir = self.get_temp_dir() + "/warmup_resumed"
        train_lib.run(tiny_config(warmup_steps=8, steps_per_epoch=6, max_epochs=1,
                                  max_eval_tokens=40), workdir, verbose=0)
        train_lib.run(tiny_config(warmup_steps=8, steps_per_epoch=6, max_epochs=2,
                                  max_eval_tokens=40), workdir, verbose=0, finish=False)
        rates = [json.loads(line)["learning_rate"]
                 for line in open(workdir + "/steps.jsonl").read().splitlines()]
        self.assertAllClose(rates, [k / 8 for k in range(1, 9)] + [1.0] * 4)

    def test_zaremba_decay_lowers_the_rate_after_each_epoch_from_its_start(self):
        # lr_decay_from_epoch=2: epochs 1 and 2 at the rate, epoch 3 at half of it, whatever
        # validation did (steps.jsonl logs each step's rate; history.json each epoch's next).
        workdir = self.get_temp_dir() + "/zaremba"
        config = tiny_config(steps_per_epoch=2, max_epochs=3, max_eval_tokens=40,
                             learning_rate=0.4, lr_decay=0.5, lr_decay_from_epoch=2,
                             patience=3)
        train_lib.run(config, workdir, verbose=0, finish=False)
        rates = [json.loads(line)["learning_rate"]
                 for line in open(workdir + "/steps.jsonl").read().splitlines()]
        self.assertAllClose(rates, [0.4, 0.4, 0.4, 0.4, 0.2, 0.2])
        history = json.loads(open(workdir + "/history.json").read())
        self.assertAllClose([epoch["next_learning_rate"] for epoch in history],
                            [0.4, 0.2, 0.1])

    def test_a_resumed_epoch_counts_the_seconds_before_its_checkpoint(self):
        # Five slow steps (over a second each), then the run stops at step 7, after ckpt-5 (a
        # kill): the resumed epoch's training seconds are the whole epoch's, not only the
        # resume's.
        workdir = self.get_temp_dir() + "/seconds_resumed"
        config = tiny_config(max_eval_tokens=40)  # 12 steps, a checkpoint every 5
        step_call, calls = TrainStep.__call__, []

        class Killed(Exception):
            pass

        def slow_then_killed(train_step, *args, **kwargs):
            calls.append(None)
            if len(calls) == 7:
                raise Killed()
            if len(calls) <= 5:
                time.sleep(1.0)
            return step_call(train_step, *args, **kwargs)

        with mock.patch.object(TrainStep, "__call__", slow_then_killed):
            with self.assertRaises(Killed):
                train_lib.run(config, workdir, verbose=0)
        latest = checkpoints.checkpoint_paths(workdir + "/checkpoints")[0]
        self.assertEndsWith(latest, "ckpt-5")
        before = checkpointing.read_epoch_seconds(latest)
        self.assertGreaterEqual(before, 5.0)

        start = time.perf_counter()
        train_lib.run(config, workdir, verbose=0, finish=False)
        resume_seconds = time.perf_counter() - start
        (record,) = reporting.read_history(workdir)
        self.assertBetween(record["train_seconds"], before, before + resume_seconds)
        # The checkpoint at the epoch's end starts the next epoch at zero seconds.
        latest = checkpoints.checkpoint_paths(workdir + "/checkpoints")[0]
        self.assertEndsWith(latest, "ckpt-12")
        self.assertEqual(checkpointing.read_epoch_seconds(latest), 0.0)

    def test_a_checkpoint_without_the_vocabulary_key_resumes(self):
        # 0.1.0's checkpoints hold no `vocabulary` hash and no `epoch_seconds` (0.2.0's none of
        # the latter): resuming them must work.
        workdir = self.get_temp_dir() + "/before_vocabulary_key"
        original = checkpointing.make_checkpoint

        def without_vocabulary(*args, vocabulary_sha256=None, epoch_seconds=None):
            return original(*args)

        config = tiny_config(steps_per_epoch=4, max_eval_tokens=40)
        with mock.patch.object(checkpointing, "make_checkpoint", without_vocabulary):
            train_lib.run(config, workdir, verbose=0)
        reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(workdir + "/checkpoints"))
        self.assertFalse(reader.has_tensor(checkpoints.VOCABULARY_KEY))
        self.assertFalse(reader.has_tensor(checkpointing.EPOCH_SECONDS_KEY))
        results = train_lib.run(config.replace(train={"max_epochs": 2}), workdir, verbose=0)
        self.assertEqual(results["global_step"], 8)
        reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(workdir + "/checkpoints"))
        self.assertTrue(reader.has_tensor(checkpoints.VOCABULARY_KEY))
        self.assertTrue(reader.has_tensor(checkpointing.EPOCH_SECONDS_KEY))

    def test_xla_matches_eager_steps(self):
        losses = {}
        for mode in ("off", "on"):
            workdir = self.get_temp_dir() + f"/jit_{mode}"
            # No dropout or zoneout: XLA draws other random numbers than the TF kernels.
            config = tiny_config(jit_compile=mode, steps_per_epoch=3, max_eval_tokens=40)
            config = config.replace(model={"input_dropout": 0.0, "hidden_dropout": 0.0,
                                           "output_dropout": 0.0, "zoneout": 0.0})
            # finish=False: no final evaluation (compiled once more) after the compared steps.
            train_lib.run(config, workdir, verbose=0, finish=False)
            losses[mode] = reporting.read_step_losses(workdir)
        self.assertEqual(losses["on"].keys(), losses["off"].keys())
        for key in losses["off"]:
            self.assertAllClose(losses["on"][key], losses["off"][key], rtol=1e-4)


class ModelKeyTest(tf.test.TestCase):
    def test_the_model_key_alone_restores_every_weight(self):
        # The contract export code relies on: `model` alone gives back the trained model.
        workdir = str(trained_tiny_run())  # the tests' shared tiny run, read only
        stored = ExperimentConfig.from_json(open(workdir + "/config.json").read())
        model = build_model(stored.model)
        path = tf.train.latest_checkpoint(workdir + "/checkpoints")
        tf.train.Checkpoint(model=model).restore(path).expect_partial()
        best = keras.saving.load_model(workdir + "/model.keras")
        for a, b in zip(model.weights, best.weights, strict=True):
            self.assertAllClose(a, b, msg=a.path)


class RunFolderPresetTest(tf.test.TestCase):
    def test_a_finished_run_folder_loads_as_a_preset(self):
        # What the README's library section does with the quick start's run: the folder, its
        # own config.json beside model.keras, is a preset for the task's from_preset.
        workdir = str(trained_tiny_run())  # the tests' shared tiny run, read only
        loaded = PointerSentinelLM.from_preset(workdir)
        best = keras.saving.load_model(workdir + "/model.keras")
        text = "the cat sat on the mat"
        self.assertAllClose(loaded.score_text(text)["log_probs"],
                            best.score_text(text)["log_probs"], atol=1e-6)
        with self.assertRaisesRegex(ValueError, "holds a PointerSentinelLM, not a"):
            LSTMLanguageModel.from_preset(workdir)


class RealCorpusTest(tf.test.TestCase):
    def setUp(self):
        super().setUp()
        self.data = shared_data_dir()
        if not self.data.is_dir():
            raise unittest.SkipTest(f"shared data not found at {self.data} (set PSMM_SHARED_DATA)")

    def test_ptb_tiny_run(self):
        config = tiny_config(steps_per_epoch=3, max_eval_tokens=400).replace(
            data={"dataset": "ptb", "data_dir": str(self.data / "ptb")})
        workdir = self.get_temp_dir() + "/ptb"
        results = train_lib.run(config, workdir, verbose=0)
        stored = ExperimentConfig.from_json(open(workdir + "/config.json").read())
        self.assertEqual(stored.model.vocab_size, 10000)  # the PTB vocabulary, <eos> included
        # Three steps from the start: better than the same model as initialised (rebuilt from
        # its seeded config), still far from trained.
        run = trained_run.load_trained_run(workdir)
        test_ids = run.corpus.ids["test"][:400]
        initial = Evaluator(build_model(stored.model), length=11).evaluate(test_ids).perplexity
        self.assertAllClose(Evaluator(run.model, length=11).evaluate(test_ids).perplexity,
                            results["test_perplexity"], rtol=1e-5)
        self.assertLess(results["test_perplexity"], 0.9 * initial)
        self.assertGreater(results["test_perplexity"], 500)

    def test_init_from_fine_tunes_a_run_on_another_corpus_with_its_vocabulary(self):
        first = str(trained_tiny_run())  # the tests' shared tiny synthetic run, read only
        first_files = snapshot(first)
        trained = keras.saving.load_model(first + "/model.keras")
        ptb = {"dataset": "ptb", "data_dir": str(self.data / "ptb")}
        config = tiny_config(steps_per_epoch=2, max_eval_tokens=200).replace(
            data=ptb, train={"init_from": first})
        second = self.get_temp_dir() + "/fine_tuned"
        results = train_lib.run(config, second, verbose=0)
        self.assertTrue(math.isfinite(results["test_perplexity"]))
        # The run reads PTB with the first run's vocabulary, and starts from its weights.
        self.assertEqual(Vocabulary.load(second + "/vocab.txt"),
                         Vocabulary.load(first + "/vocab.txt"))
        start = pointer_diagnostics.load_initial_pointer_weights(second + "/initial_pointer.npz")
        for name, value in pointer_diagnostics.pointer_weights(trained).items():
            self.assertAllClose(start[name], value, msg=name)
        # A config describing another network is refused before anything is written.
        bad = config.replace(model={"hidden_dim": 32})
        with self.assertRaisesRegex(run_setup.RunRefusedError,
                                    "its model is not the one the config describes "
                                    r"\(hidden_dim: config 32, model 16\)"):
            train_lib.run(bad, self.get_temp_dir() + "/refused", verbose=0)
        self.assertFalse(os.path.exists(self.get_temp_dir() + "/refused/config.json"))
        with self.assertRaisesRegex(run_setup.RunRefusedError, "expected a psmm-train run "
                                    "folder holding model.keras"):
            train_lib.run(config.replace(train={"init_from": second + "/nothing"}),
                          self.get_temp_dir() + "/refused", verbose=0)
        self.assertEqual(snapshot(first), first_files)

    def test_wikitext_trains_on_the_valid_file(self):
        config = tiny_config(steps_per_epoch=2, max_eval_tokens=300).replace(data={
            "dataset": "wikitext2", "data_dir": str(self.data / "wikitext-2"),
            "train_split": "valid", "valid_split": "test", "test_split": "test"})
        workdir = self.get_temp_dir() + "/wiki"
        results = train_lib.run(config, workdir, verbose=0)
        vocabulary = Vocabulary.load(workdir + "/vocab.txt")
        # Every word of wiki.valid (count >= 1), and nothing else.
        train_tokens = load_splits(self.data / "wikitext-2", "wikitext2")["valid"]
        self.assertEqual(set(vocabulary.tokens), set(train_tokens) | {"<unk>"})
        self.assertTrue(math.isfinite(results["test_perplexity"]))


if __name__ == "__main__":
    tf.test.main()
