"""Exports of input-to-output gate models (Takase et al. 2017): a frozen PSMM or LSTM with a
trained gate, served through the same signatures and checked against Keras in a fresh process."""

import json
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from psmm_tf.data import Vocabulary
from psmm_tf.evaluation import NeuralCache
from psmm_tf.export import STATE_NAMES, export_saved_model, testing
from psmm_tf.export.serving_module import ServingModule
from psmm_tf.export.tokenization import reference_tokens
from psmm_tf.models import InputOutputGateLM

TEXTS = ["the cat sat on the mat", "a dog ran\nto the house and the cat",
         "the big red tree saw his dog"]
CONTEXTS = ["the cat sat on the mat and the", "", "a dog ran to the house\nthe red"]
IDS = np.array([[2, 3, 4, 5, 6, 7, 8, 9, 10, 2, 3], [11, 12, 13, 0, 0, 0, 0, 0, 0, 0, 0],
                [14, 15, 16, 17, 18, 19, 20, 0, 0, 0, 0]], np.int32)
LENGTHS = np.array([11, 3, 7], np.int32)
CUTS = (0, 4, 6, 11)  # score_stream reads IDS[0] in three pieces


def gated(kind, seed):
    """A tiny trained-looking model of `kind` wrapped in a gate whose weights are far from 0.5."""
    base, config = testing.tiny_model(kind=kind, seed=seed)
    # Random logits are nearly flat; a trained softmax is peaked (logits spread ~3), and only
    # then does the gate, which scales them, matter.
    logits = base(IDS)["vocab_logits"].numpy()
    for variable in base.vocab_head.weights:
        variable.assign(variable * (3.0 / logits.std()))
    model = InputOutputGateLM(base, embedding_dim=8, dropout=0.5, seed=seed)
    for index, variable in enumerate(model.gate.trainable_weights):
        variable.assign(tf.random.stateless_normal(variable.shape, [seed, index]) * 1.5)
    return model, config


class InputOutputGateExportTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp()
        cls.workdir = os.path.join(cls.tmp, "gate_run")
        os.makedirs(cls.workdir)
        vocab_file = testing.write_vocabulary(os.path.join(cls.workdir, "vocab.txt"))
        cls.vocab = Vocabulary.load(vocab_file)
        cls.models = {}
        cls.models["psmm"], config = gated("psmm", seed=5)
        cls.models["lstm"], _ = gated("lstm", seed=6)
        # A gate run's workdir as the trainer writes it: its config names the base run's
        # model.keras (moved away since, so only the run's own model.keras can be exported).
        fields = json.loads(config.to_json())
        fields["model"]["base_model"] = os.path.join(cls.tmp, "moved", "model.keras")
        with open(os.path.join(cls.workdir, "config.json"), "w") as f:
            json.dump(fields, f)
        cls.models["psmm"].save(os.path.join(cls.workdir, "model.keras"))
        cls.stdout = testing.run_main([f"--workdir={cls.workdir}",
                                       f"--export_base={cls.tmp}/psmm_base"])
        cls.export_dirs = {
            "psmm": os.path.join(cls.tmp, "psmm_base", "1"),
            "lstm": export_saved_model.export(cls.models["lstm"], vocab_file,
                                              os.path.join(cls.tmp, "lstm_base")),
        }
        requests = []
        for kind, path in cls.export_dirs.items():
            requests += [
                (f"{kind}/default", path, "serving_default", {"texts": TEXTS}, None),
                (f"{kind}/text", path, "score_text", {"texts": TEXTS}, None),
                (f"{kind}/score", path, "score", {"token_ids": IDS, "lengths": LENGTHS}, None),
                (f"{kind}/init", path, "initial_state", {"stream_ids": [0, 1, 2]}, None),
                (f"{kind}/text_stream", path, "score_text_stream", {"texts": TEXTS},
                 f"{kind}/init"),
                (f"{kind}/next", path, "predict_next", {"texts": CONTEXTS, "k": 5}, None),
                (f"{kind}/init1", path, "initial_state", {"stream_ids": [0]}, None),
            ]
            previous = f"{kind}/init1"
            for piece in range(3):
                ids = IDS[:1, CUTS[piece]:CUTS[piece + 1]]
                requests.append((f"{kind}/stream{piece}", path, "score_stream",
                                 {"token_ids": ids, "lengths": [ids.shape[1]]}, previous))
                previous = f"{kind}/stream{piece}"
        cls.fresh = testing.signatures_in_fresh_process(requests, cls.tmp)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def keras_scores(self, model, ids):
        """Keras `score()` of one text's token ids read after `<eos>`: (log_probs, gate)."""
        ids = np.asarray(ids, np.int32)[None]
        inputs = np.concatenate([[[self.vocab.eos_id]], ids[:, :-1]], axis=1)
        out = model.score_with_state(inputs, ids)
        return out["log_probs"].numpy()[0], out["gate"].numpy()[0]

    def test_the_gate_matters(self):
        # Otherwise the tests below could not tell the gated model from its base.
        for model in self.models.values():
            ids = self.vocab.encode(reference_tokens(TEXTS[0]))
            gated_log_probs, _ = self.keras_scores(model, ids)
            base_log_probs, _ = self.keras_scores(model.base_model, ids)
            self.assertGreater(np.abs(gated_log_probs - base_log_probs).max(), 0.1)

    def test_workdir_of_a_gate_run_exports_its_model_keras(self):
        self.assertIn(self.export_dirs["psmm"], self.stdout)
        for path in self.export_dirs.values():
            self.assertEqual(testing.servability_problems(path), [])
        with open(os.path.join(self.export_dirs["psmm"], "assets.extra", "config.json")) as f:
            self.assertTrue(json.load(f)["model"]["base_model"].endswith("model.keras"))
        lone = os.path.join(self.tmp, "lone_run")
        os.makedirs(lone, exist_ok=True)
        shutil.copy(os.path.join(self.workdir, "config.json"), lone)
        shutil.copy(os.path.join(self.workdir, "vocab.txt"), lone)
        with self.assertRaisesRegex(FileNotFoundError,
                                    r"input-to-output gate run.*model.keras does not exist"):
            export_saved_model.load_model(workdir=lone)

    def test_score_signatures_equal_keras_in_a_fresh_process(self):
        self.assertFalse(self.fresh["psmm_tf_importable"])
        for kind, model in self.models.items():
            for key in ("default", "text", "text_stream"):
                out = self.fresh[f"{kind}/{key}"]
                for row, text in enumerate(TEXTS):
                    ids = self.vocab.encode(reference_tokens(text))
                    log_probs, gate = self.keras_scores(model, ids)
                    n = len(ids)
                    self.assertEqual(out["num_tokens"][row], n)
                    self.assertAllClose(out["log_probs"][row][:n], log_probs, atol=1e-5)
                    self.assertAllClose(out["gate"][row][:n], gate, atol=1e-5)
                    self.assertAllClose(out["log_likelihood"][row], log_probs.sum(), atol=1e-4)
            out = self.fresh[f"{kind}/score"]
            for row, length in enumerate(LENGTHS):
                log_probs, gate = self.keras_scores(model, IDS[row, :length])
                self.assertAllClose(out["log_probs"][row][:length], log_probs, atol=1e-5)
                self.assertAllClose(out["gate"][row][:length], gate, atol=1e-5)
                self.assertAllClose(out["perplexity"][row], np.exp(-log_probs.mean()),
                                    rtol=1e-5)
            if kind == "psmm":  # the pointer's gate is served, neither 0 nor 1
                self.assertBetween(float(self.fresh["psmm/score"]["gate"][0, 3]), 0.01, 0.99)

    def test_streamed_pieces_equal_the_whole_in_a_fresh_process(self):
        for kind, model in self.models.items():
            pieces = [self.fresh[f"{kind}/stream{p}"]["log_probs"][0] for p in range(3)]
            whole, _ = self.keras_scores(model, IDS[0])
            self.assertAllClose(np.concatenate(pieces), whole, atol=1e-5)
            state = self.fresh[f"{kind}/init"]
            self.assertEqual(sorted(state), sorted(STATE_NAMES))
            self.assertEqual(state["lstm_state"].shape, (3, 2, 2, 16))
            self.assertEqual(state["memory_hidden"].shape, (3, 7, 16))

    def test_predict_next_is_the_gated_distribution_in_a_fresh_process(self):
        for kind, model in self.models.items():
            out = self.fresh[f"{kind}/next"]
            for row, context in enumerate(CONTEXTS):
                ids = self.vocab.encode(["<eos>"] + reference_tokens(context, False))[None]
                outputs = model(ids)
                distribution = model.distribution(outputs).numpy()[0, -1]
                order = np.argsort(-distribution)[:5]
                self.assertAllClose(out["top_probs"][row], distribution[order], atol=1e-5)
                self.assertAllEqual(out["top_ids"][row], order)
                self.assertAllEqual(out["top_words"][row].astype(str),
                                    [self.vocab.tokens[i] for i in order])
                gate = outputs["gate"].numpy()[0, -1] if kind == "psmm" else 1.0
                self.assertAllClose(out["gate"][row], gate, atol=1e-6)

    def test_a_cache_over_the_gated_model(self):
        # The two wrappers compose: the endpoints of NeuralCache(InputOutputGateLM(...)).
        model = self.models["psmm"]
        cache = NeuralCache(model, window=10, theta=1.0, lam=0.4)
        module = ServingModule(cache, os.path.join(self.workdir, "vocab.txt"))
        out = module.score({"token_ids": tf.constant(IDS), "lengths": tf.constant(LENGTHS)})
        for row, length in enumerate(LENGTHS):
            ids = IDS[row:row + 1, :length]
            inputs = np.concatenate([[[self.vocab.eos_id]], ids[:, :-1]], axis=1)
            expected = cache.score(inputs, ids)["log_probs"].numpy()[0]
            self.assertAllClose(out["log_probs"][row][:length], expected, atol=1e-5)
            if length > 2:
                self.assertNotAllClose(expected, self.keras_scores(model, ids[0])[0])


if __name__ == "__main__":
    tf.test.main()
