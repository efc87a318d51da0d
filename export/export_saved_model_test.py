"""Tests of `psmm-export`: sources (workdir, .keras), TF Serving layout, versions, warmup, and
loading the export where psmm_tf is absent, through a TF1 session and `saved_model_cli`."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from psmm_tf.data import Vocabulary
from psmm_tf.export import export_saved_model, testing, warmup
from psmm_tf.export.clients import LocalClient

SIGNATURES = ("serving_default", "score_text", "score", "score_text_stream", "score_stream",
              "initial_state", "predict_next")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ["the cat sat on the mat", "a zebra ran\nto the house", "the big red tree saw his dog"]


def keras_log_probs(model, vocab, texts):
    """Keras `score()` of each text (read after a leading <eos>), as a list of arrays."""
    from psmm_tf.export.tokenization import reference_tokens

    result = []
    for text in texts:
        ids = vocab.encode(reference_tokens(text))[None]
        inputs = np.concatenate([[[vocab.eos_id]], ids[:, :-1]], axis=1)
        result.append(model.score_with_state(inputs, ids)["log_probs"].numpy()[0])
    return result


class ExportTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp()
        workdir = os.path.join(cls.tmp, "workdir")
        os.makedirs(workdir)
        testing.write_vocabulary(os.path.join(workdir, "vocab.txt"))
        cls.vocab = Vocabulary.load(os.path.join(workdir, "vocab.txt"))
        cls.model, config = testing.tiny_model(seed=5)
        with open(os.path.join(workdir, "config.json"), "w") as f:
            f.write(config.to_json())
        # Two checkpoints as the trainer writes them (more keys than `model`); the export must
        # take the latest, whose weights are the model's final ones.
        manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=cls.model, progress=tf.Variable(1)),
            os.path.join(workdir, "checkpoints"), max_to_keep=3)
        manager.save()
        for variable in cls.model.trainable_variables:
            variable.assign(variable * 1.5 + 0.01)
        manager.save()
        cls.model.save(os.path.join(workdir, "model.keras"))
        cls.workdir, cls.base = workdir, os.path.join(cls.tmp, "base")
        cls.stdout = testing.run_main([f"--workdir={workdir}", f"--export_base={cls.base}"])
        cls.export_dir = os.path.join(cls.base, "1")
        cls.client = LocalClient(cls.base)
        cls.expected = keras_log_probs(cls.model, cls.vocab, TEXTS)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def assert_scores_expected(self, log_probs, num_tokens):
        for row, expected in enumerate(self.expected):
            self.assertEqual(num_tokens[row], len(expected))
            self.assertAllClose(log_probs[row][:len(expected)], expected, atol=1e-5)

    def test_workdir_export_layout_and_scores(self):
        self.assertEqual(self.client.export_dir, self.export_dir)
        self.assertEqual(testing.file_listing(self.export_dir), [
            "assets.extra/config.json", "assets.extra/tf_serving_warmup_requests",
            "assets/vocab.txt", "fingerprint.pb", "saved_model.pb",
            "variables/variables.data-00000-of-00001", "variables/variables.index"])
        for name in SIGNATURES + ("lstm_state", "memory_hidden", "top_words", "perplexity"):
            self.assertIn(name, self.stdout)
        out = self.client.predict("serving_default", {"texts": TEXTS})
        self.assert_scores_expected(out["log_probs"], out["num_tokens"])

    def test_versions_are_never_overwritten(self):
        base = os.path.join(self.tmp, "versions")
        model, vocab_file, _ = self.model, os.path.join(self.workdir, "vocab.txt"), None
        # The model is traced twice: once in the function the four scoring signatures share,
        # once in predict_next; save's own trace of the module's functions calls the traced
        # signatures (docs/results.md, "The test suite's time").
        traced, call = [], model.call
        model.call = lambda *args, **kwargs: traced.append(1) or call(*args, **kwargs)
        try:
            self.assertEqual(export_saved_model.export(model, vocab_file, base, version=4),
                             os.path.join(base, "4"))
        finally:
            del model.call
        self.assertLen(traced, 2)
        # Under ~488 tokens the export's own warmup was refused, and TF
        # Serving would not have loaded the version. Version 5 allows 2 tokens a request
        # (test_keras_model_export 100, through the flag).
        self.assertEqual(export_saved_model.export(model, vocab_file, base, max_tokens=2),
                         os.path.join(base, "5"))
        self.assertEqual(self.replay_warmup(base, 5), set(SIGNATURES) - {"score_text"},
                         "limit 2")
        with self.assertRaisesRegex(FileExistsError, "never overwritten"):
            export_saved_model.export(model, vocab_file, base, version=4)
        # A failing export (vocabulary of another size) leaves nothing behind.
        short = testing.write_vocabulary(os.path.join(self.tmp, "short.txt"), testing.WORDS[:5])
        with self.assertRaisesRegex(ValueError, "has 5 tokens; the model's vocab_size is 24"):
            export_saved_model.export(model, short, base)
        self.assertEqual(sorted(os.listdir(base)), ["4", "5"])

    def test_keras_model_export(self):
        base = os.path.join(self.tmp, "from_keras")
        stdout = testing.run_main([f"--keras_model={self.workdir}/model.keras",
                                   f"--vocab={self.workdir}/vocab.txt", f"--export_base={base}",
                                   "--model_version=7", "--max_request_tokens=100"])
        self.assertIn(os.path.join(base, "7"), stdout)
        out = LocalClient(base).predict("serving_default", {"texts": TEXTS})
        self.assert_scores_expected(out["log_probs"], out["num_tokens"])
        # The warmup of an export allowing 100 tokens a request fits it.
        self.assertEqual(self.replay_warmup(base, 7), set(SIGNATURES) - {"score_text"},
                         "limit 100")

    def test_bad_sources_are_refused(self):
        with self.assertRaisesRegex(ValueError, "exactly one of"):
            export_saved_model.load_model(workdir=self.workdir,
                                          keras_model=f"{self.workdir}/model.keras")
        with self.assertRaisesRegex(FileNotFoundError, "No checkpoint"):
            export_saved_model.load_model(checkpoint=self.tmp,
                                          config=f"{self.workdir}/config.json",
                                          vocab=f"{self.workdir}/vocab.txt")

    def replay_warmup(self, base, version):
        """Replays an export's warmup requests against it; returns the signatures seen."""
        logs = warmup.read_warmup_file(
            os.path.join(base, str(version), "assets.extra", warmup.WARMUP_FILE))
        client = LocalClient(base, version=version)
        names = set()
        for log in logs:
            request = log.predict_log.request
            self.assertEqual(request.model_spec.name, "psmm")
            inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
            outputs = client.predict(request.model_spec.signature_name, inputs)
            self.assertNotEmpty(outputs)
            names.add(request.model_spec.signature_name)
        return names

    def test_warmup_requests_replay(self):
        self.assertEqual(self.replay_warmup(self.base, 1), set(SIGNATURES) - {"score_text"})

    def test_models_config_example_parses(self):
        path = os.path.join(os.path.dirname(__file__), "models.config")
        with open(path) as f:
            config = text_format.Parse(f.read(), model_server_config_pb2.ModelServerConfig())
        (model,) = config.model_config_list.config
        self.assertEqual((model.name, model.model_platform), ("psmm", "tensorflow"))

    def test_fresh_process_without_psmm_tf(self):
        inputs = os.path.join(self.tmp, "fresh_out.npz")
        script = textwrap.dedent(f"""
            import os, sys
            sys.modules["psmm_tf"] = None  # any import of the package now fails
            sys.modules["export"] = None
            sys.path = [p for p in sys.path if p and os.path.abspath(p) != {REPO!r}]
            import numpy as np, tensorflow as tf
            loaded = tf.saved_model.load({self.export_dir!r})
            texts = tf.constant({TEXTS!r})
            sig = loaded.signatures
            out = {{}}
            def keep(prefix, result):
                out.update({{prefix + k: v.numpy() for k, v in result.items()}})
            keep("default/", sig["serving_default"](texts=texts))
            keep("text/", sig["score_text"](texts=texts))
            state = sig["initial_state"](stream_ids=tf.range(3))
            keep("init/", state)
            keep("text_stream/", sig["score_text_stream"](texts=texts, **state))
            ids = tf.constant([[2, 3, 4, 5], [6, 7, 0, 0], [8, 9, 10, 0]])
            lengths = tf.constant([4, 2, 3])
            keep("score/", sig["score"](token_ids=ids, lengths=lengths))
            keep("stream/", sig["score_stream"](token_ids=ids, lengths=lengths, **state))
            keep("next/", sig["predict_next"](texts=texts, k=tf.constant(5)))
            np.savez({inputs!r}, **out)
            try:
                import psmm_tf  # noqa: F401
                print("psmm_tf importable")
            except ImportError:
                print("psmm_tf absent")
        """)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        result = subprocess.run([sys.executable, "-c", script], cwd=self.tmp, env=env,
                                capture_output=True, text=True, timeout=180)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("psmm_tf absent", result.stdout)
        fresh = np.load(inputs, allow_pickle=True)
        self.assert_scores_expected(fresh["default/log_probs"], fresh["default/num_tokens"])
        self.assert_scores_expected(fresh["text_stream/log_probs"],
                                    fresh["text_stream/num_tokens"])
        here = self.client.predict("score", {"token_ids": [[2, 3, 4, 5], [6, 7, 0, 0],
                                                           [8, 9, 10, 0]], "lengths": [4, 2, 3]})
        self.assertAllClose(fresh["score/log_probs"], here["log_probs"], atol=1e-6)
        self.assertAllClose(fresh["stream/log_probs"], here["log_probs"], atol=1e-6)
        here = self.client.predict("predict_next", {"texts": TEXTS, "k": 5})
        self.assertAllClose(fresh["next/top_probs"], here["top_probs"], atol=1e-6)
        self.assertAllEqual(fresh["next/top_words"].astype(str), here["top_words"].astype(str))
        self.assertEqual(fresh["init/lstm_state"].shape, (3, 2, 2, 16))

    def test_tf1_session_loader(self):
        # TF Serving's path: a graph and a session, fed and fetched by the signature's names.
        with testing.tf1_session_signatures(self.export_dir) as run:
            out = run("serving_default", {"texts": TEXTS})
            self.assert_scores_expected(out["log_probs"], out["num_tokens"])
            state = run("initial_state", {"stream_ids": [0, 1, 2]})
            out = run("score_text_stream", {"texts": TEXTS, **state})
            self.assert_scores_expected(out["log_probs"], out["num_tokens"])
            with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                        r"`token_ids` holds a token id outside"):
                run("score", {"token_ids": [[2, 99]], "lengths": [2]})
            with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                        r"`token_ids` must have rank 2"):
                run("score", {"token_ids": [2, 3], "lengths": [2]})

    def test_saved_model_cli_run(self):
        cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
        outdir = os.path.join(self.tmp, "cli_out")
        result = subprocess.run(
            [cli, "run", f"--dir={self.export_dir}", "--tag_set=serve",
             "--signature_def=serving_default", f"--input_exprs=texts={TEXTS!r}",
             f"--outdir={outdir}"],
            capture_output=True, text=True, timeout=180,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        log_probs = np.load(os.path.join(outdir, "log_probs.npy"))
        num_tokens = np.load(os.path.join(outdir, "num_tokens.npy"))
        self.assert_scores_expected(log_probs, num_tokens)
