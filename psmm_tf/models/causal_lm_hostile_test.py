"""Hostile inputs to the keras-hub API: presets, fit, generate, score.

Each case is refused with a message naming the input and what was expected, before anything
is written or any weight moves, or is honoured (a per-text `sample_weight` with strings).
docs/hostile_inputs.md, "The Python and keras-hub API", lists them.
"""

import hashlib
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np

from psmm_tf import testing
from psmm_tf.models import PointerSentinelLM, read_model_file
from psmm_tf.models.generation import MAX_GENERATE_LENGTH

WORDS = testing.TINY_WORDS
_task = testing.tiny_task
_ids = testing.random_ids


def _hashes(folder):
    """{relative path: sha256} of every file under `folder`."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path):
                found[os.path.relpath(path, folder)] = "-> " + os.readlink(path)
                continue
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return found


def _weights(model):
    return [np.array(w) for w in model.trainable_weights]


class PresetTest(testing.TestCase):

    def test_save_to_preset_never_replaces_a_users_metadata(self):
        # The damage case: a folder with the user's metadata.json and no model.keras.
        model = _task()
        folder = os.path.join(self.get_temp_dir(), "mine")
        os.makedirs(folder)
        with open(os.path.join(folder, "metadata.json"), "w") as f:
            f.write('{"author": "me"}')
        before = _hashes(folder)
        with self.assertRaisesRegex(FileExistsError, r"mine/metadata.json exists"):
            model.save_to_preset(folder)
        self.assertEqual(_hashes(folder), before)

    def test_save_to_preset_refuses_a_keras_file_name_and_a_file(self):
        model = _task()
        path = os.path.join(self.get_temp_dir(), "x.keras")
        with self.assertRaisesRegex(ValueError, r"a preset is a folder.*use model.save\("):
            model.save_to_preset(path)
        self.assertFalse(os.path.lexists(path))
        notes = os.path.join(self.get_temp_dir(), "notes.txt")
        with open(notes, "w") as f:
            f.write("mine")
        before = _hashes(self.get_temp_dir())
        with self.assertRaisesRegex(FileExistsError, r"notes.txt exists and is not a folder"):
            model.save_to_preset(notes)
        self.assertEqual(_hashes(self.get_temp_dir()), before)

    def test_from_preset_names_a_file_a_missing_path_and_a_symlink_loop(self):
        tmp = self.get_temp_dir()
        notes = os.path.join(tmp, "notes.txt")
        with open(notes, "w") as f:
            f.write("mine")
        loop = os.path.join(tmp, "loop")
        os.symlink(loop, loop)
        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        before = _hashes(tmp)
        what = r"a preset is a folder holding config.json .* or model.keras"
        for path, why in ((notes, "is a file"), (os.path.join(tmp, "missing"), "does not exist"),
                          (loop, "is a symlink loop"),
                          (empty, "holds no config.json and no model.keras")):
            with self.assertRaisesRegex(ValueError, f"preset '{path}' {why}.*{what}"):
                PointerSentinelLM.from_preset(path)
        self.assertEqual(_hashes(tmp), before)


class DiskFullTest(testing.TestCase):

    def test_reading_a_keras_file_on_a_full_disk_says_the_disk_is_full(self):
        # Row 234: the file-size limit (EFBIG, as ENOSPC on a full disk) stops the
        # unpacking of model.keras into the temporary folder; the error blamed the file.
        path = os.path.join(self.get_temp_dir(), "model.keras")
        _task().save(path)
        with testing.file_size_limit(5000), self.assertRaises(OSError) as raised:
            read_model_file(path)
        err = raised.exception
        self.assertRegex(f"{err.errno} {err.filename} {err.strerror}",
                         r"^27 /\S+ out of disk space \(File too large\) unpacking "
                         rf"{path} to read it: free space in the temporary folder")
        self.assertIsInstance(read_model_file(path), PointerSentinelLM)  # the file is sound


class FunctionalKerasHubTest(testing.TestCase):

    def test_after_a_functional_keras_hub_model_psmm_models_say_why_they_cannot_run(self):
        # Row 285: building GPT2's functional backbone makes Keras put `Functional` under
        # keras-hub's Backbone for the whole process (keras-team/keras#17270); psmm_tf's models,
        # built before or after, stop with one message when built or called, instead of Keras'
        # TypeError and AttributeError. A child process: the change cannot be undone in this one.
        script = textwrap.dedent("""
            import keras_hub, numpy as np
            from psmm_tf import testing
            model = testing.tiny_task()
            ids = np.array([[2, 3, 4]])
            model(ids, memory=model.empty_memory(1))
            keras_hub.models.GPT2Backbone(vocabulary_size=30, num_layers=1, num_heads=2,
                                          hidden_dim=8, intermediate_dim=16,
                                          max_sequence_length=16)
            for name, run in (("call", lambda: model(ids, memory=model.empty_memory(1))),
                              ("backbone", lambda: model.backbone(ids)),
                              ("generate", lambda: model.generate("w1 w2", max_length=6)),
                              ("build", testing.tiny_task)):
                try:
                    run()
                    print(name, "ran")
                except RuntimeError as err:
                    print(name, "refused:", "keras-team/keras#17270" in str(err))
            """)
        done = subprocess.run([sys.executable, "-c", script], env=testing.child_env(),
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        self.assertEqual(done.stdout.split("\n")[:4], ["call refused: True",
                                                        "backbone refused: True",
                                                        "generate refused: True",
                                                        "build refused: True"])


class FitTest(testing.TestCase):

    def test_nan_or_inf_sample_weight_is_refused_before_any_update(self):
        model = _task()
        x, y = _ids(self.rng, 1, 4)
        before = _weights(model)
        for bad in (np.nan, np.inf, -1.0):
            with self.assertRaisesRegex(ValueError, r"`sample_weight` holds .* at index \(0, 1\)"
                                                    r": expected finite weights >= 0"):
                model.fit(x, y, sample_weight=np.array([[1, bad, 1, 1]]), verbose=0)
        with self.assertRaisesRegex(ValueError, r"`sample_weight` holds nan at index \(0,\)"):
            model.fit(["w1 w2 w3"], sample_weight=np.array([np.nan]), verbose=0)
        for old, new in zip(before, _weights(model)):
            self.assertAllEqual(old, new)

    def test_an_unbatched_dataset_of_texts_is_refused_naming_the_batch(self):
        import tensorflow as tf

        model = _task()
        before = _weights(model)
        with self.assertRaisesRegex(ValueError, r"token_ids must be \(batch_size, T\), got rank "
                                                r"1: .*dataset\.batch\(n\)"):
            model.fit(tf.data.Dataset.from_tensor_slices(["w1 w2 w3", "w4 w5"]), verbose=0)
        for old, new in zip(before, _weights(model)):
            self.assertAllEqual(old, new)
        model.fit(tf.data.Dataset.from_tensor_slices(["w1 w2 w3", "w4 w5"]).batch(2), verbose=0)

    def test_a_per_text_sample_weight_with_strings_is_honoured(self):
        # Weight 0: no gradient, nothing moves (SGD); weight 2: the step of weight 1, twice
        # (SGD at rate r with weight 2 = rate 2r with weight 1, clipping off).
        texts = ["w1 w2 w3 w4 w5"]
        model = _task(dropout=0.0)
        model.compile(optimizer=keras.optimizers.SGD(0.1))
        before = _weights(model)
        model.fit(texts, sample_weight=np.array([0.0]), verbose=0)
        for old, new in zip(before, _weights(model)):
            self.assertAllEqual(old, new)
        doubled = _task(dropout=0.0)
        doubled.compile(optimizer=keras.optimizers.SGD(0.1))
        # The loss is averaged with the weights: weight 2 in one text of two doubles that
        # text's share. Against the same texts with the first one repeated (weights 1).
        doubled.fit(["w1 w2 w3 w4 w5", "w6 w7 w8"], sample_weight=np.array([2.0, 1.0]),
                    batch_size=2, shuffle=False, verbose=0)
        repeated = _task(dropout=0.0)
        repeated.compile(optimizer=keras.optimizers.SGD(0.1))
        repeated.fit(["w1 w2 w3 w4 w5", "w1 w2 w3 w4 w5", "w6 w7 w8"], batch_size=3,
                     shuffle=False, verbose=0)
        for a, b in zip(_weights(doubled), _weights(repeated)):
            self.assertAllClose(a, b, atol=1e-6)
        with self.assertRaisesRegex(ValueError, r"one weight per text, shape \(batch_size,\)"):
            model.fit(texts, sample_weight=np.ones((1, 5)), verbose=0)

    def test_empty_and_rank_1_inputs_are_refused_and_the_model_still_fits(self):
        model = _task()
        for x, message in (([], r"x is empty"), (np.array([], dtype=str), r"x is empty"),
                           (np.zeros((0, 4), "int32"), r"x is empty"),
                           ([1, 2, 3], r"need targets: give y")):
            with self.assertRaisesRegex(ValueError, message):
                model.fit(x, verbose=0)
        with self.assertRaisesRegex(ValueError, r"`token_ids` must have rank 2"):
            model.fit([1, 2, 3], [2, 3, 4], verbose=0)
        x, y = _ids(self.rng, 2, 4)
        self.assertLen(model.fit(x, y, verbose=0).history["loss"], 1)

    def test_float_ids_must_be_whole_and_in_the_vocabulary(self):
        model = _task()
        x, y = _ids(self.rng, 1, 4)
        before = _weights(model)
        with self.assertRaisesRegex(ValueError, r"`token_ids` holds 1.5: expected integer ids"):
            model.fit(np.array([[1.5, 2.0, 3.7, 4.2]]), y, verbose=0)
        with self.assertRaisesRegex(ValueError, r"`target_ids` holds the id 1000000000, "
                                                r"outside the vocabulary \[0, 22\)"):
            model.fit(x, np.full((1, 4), 1e9), verbose=0)
        with self.assertRaisesRegex(ValueError, r"`target_ids` holds the id 1e\+30"):
            model.evaluate(x, np.full((1, 4), 1e30), verbose=0)
        for old, new in zip(before, _weights(model)):
            self.assertAllEqual(old, new)
        # Whole floats in range are ids.
        self.assertLen(model.fit(x.astype("float32"), y.astype("float64"),
                                 verbose=0).history["loss"], 1)


class GenerateTest(testing.TestCase):

    def test_preprocessed_prompts_need_the_preprocessor_off(self):
        model = _task()
        prompts = model.preprocessor.generate_preprocess(["w1 w2", "w3"], sequence_length=8)
        with self.assertRaisesRegex(ValueError, r"generate: the prompts are preprocessed ids \(a "
                                                r"dict of \['padding_mask', 'token_ids'\]\), but "
                                                r"this model has a preprocessor.*preprocessor = "
                                                r"None"):
            model.generate(prompts)
        model.preprocessor = None
        generated = model.generate(prompts, stop_token_ids=None)
        self.assertEqual(np.asarray(generated["token_ids"]).shape, (2, 8))

    def test_the_backbone_reads_keras_hubs_input_dict(self):
        model = _task()
        inputs = model.preprocessor(["w1 w2 w3", "w4"])[0]
        hidden, state = model.backbone(inputs)
        expected, expected_state = model.backbone(inputs["token_ids"],
                                                  token_mask=inputs["padding_mask"])
        self.assertAllClose(hidden, expected)
        self.assertAllClose(state, expected_state)
        numeric = dict(inputs, padding_mask=np.asarray(inputs["padding_mask"], "int32"))
        self.assertAllClose(model.backbone(numeric)[0], expected)
        with self.assertRaisesRegex(ValueError, r"LSTMBackbone reads token_ids \(batch_size, T\), "
                                                r"or keras-hub's dict of token_ids and "
                                                r"padding_mask; got a dict of \['ids'\]"):
            model.backbone({"ids": inputs["token_ids"]})
        with self.assertRaisesRegex(ValueError, "give one of them"):
            model.backbone(inputs, token_mask=inputs["padding_mask"])

    def test_max_length_must_be_an_integer_in_range_beyond_the_prompt(self):
        model = _task()
        for bad in (0, -5, 1, 2.5, True, MAX_GENERATE_LENGTH + 1, 10**6):
            with self.assertRaisesRegex(ValueError, r"generate: max_length must be"):
                model.generate("w1 w2", max_length=bad)
        # The prompt: <eos> w1 w2 w3 w4 = 5 tokens.
        with self.assertRaisesRegex(ValueError, r"max_length=5 leaves no position to generate"
                                                r": the longest prompt holds 5 tokens"):
            model.generate(["w1", "w1 w2 w3 w4"], max_length=5)
        with self.assertRaisesRegex(ValueError, r"sequence_length \(12, max_length=None\)"):
            model.generate(" ".join(["w1"] * 11))
        text = model.generate("w1 w2 w3 w4", max_length=6, stop_token_ids=None)
        self.assertEqual(text.split()[:4], ["w1", "w2", "w3", "w4"])
        self.assertLen(text.split(), 5)

    def test_prompts_held_in_arrays_read_as_texts_and_bytes_must_be_utf8(self):
        model = _task()
        weights = [w.numpy() for w in model.weights]
        text = model.generate("w1 w2", max_length=6, stop_token_ids=None)
        # A rank-0 array failed inside the traced step (IndexError); now it is the text.
        self.assertEqual(model.generate(np.array("w1 w2"), max_length=6, stop_token_ids=None),
                         text)
        for bad in (np.array([b"w1 \xff"]), b"\xfe w2"):
            with self.assertRaisesRegex(ValueError, r"generate: prompt 0 is not UTF-8 text"):
                model.generate(bad, max_length=6)
        for before, after in zip(weights, model.weights):
            self.assertAllEqual(before, after)

    def test_enable_lora_without_a_layer_that_supports_it_is_refused(self):
        model = _task()
        backbone = model.backbone
        trainable = [w.path for w in backbone.trainable_weights]
        for names in (None, ["lstm_0"], ["query"]):
            with self.assertRaisesRegex(ValueError, r"no layer of this LSTMBackbone with LoRA "
                                                    r"support is named; those that have it: "
                                                    r"\['embedding'\]"):
                backbone.enable_lora(2, target_layer_names=names)
            # keras-hub would have frozen every weight and trained nothing.
            self.assertEqual([w.path for w in backbone.trainable_weights], trainable)
        before = model.score_text(["w1 w2 w3"])["log_probs"]
        backbone.enable_lora(2, target_layer_names="embedding")  # one name as a str
        self.assertEqual(sorted(w.name for w in backbone.trainable_weights),
                         ["lora_embeddings_a", "lora_embeddings_b"])
        factor = backbone.embedding.lora_embeddings_b
        factor.assign(np.random.default_rng(0).normal(size=factor.shape).astype("float32"))
        # The compiled scoring function traced before LoRA is dropped: the factors count.
        adapted = model.score_text(["w1 w2 w3"])["log_probs"]
        self.assertNotAllClose(adapted, before)
        with self.assertRaisesRegex(ValueError, r"hold the LoRA factors of Dense layers only, "
                                                r"not those of \['embedding'\]; model.save"):
            backbone.save_lora_weights(os.path.join(self.get_temp_dir(), "a.lora.h5"))
        self.assertFalse(os.path.exists(os.path.join(self.get_temp_dir(), "a.lora.h5")))
        path = os.path.join(self.get_temp_dir(), "adapted.keras")
        model.save(path)
        self.assertAllClose(keras.saving.load_model(path).score_text(["w1 w2 w3"])["log_probs"],
                            adapted, atol=1e-6)

    def test_stop_token_ids_must_be_ids_in_the_vocabulary(self):
        model = _task()
        for bad, message in (([99999], r"holds the id 99999, outside"),
                             ([-1], r"holds the id -1, outside"),
                             ("<eos>", r"stop_token_ids='<eos>'"),
                             ([1.0], r"holds 1.0"), (1, r"stop_token_ids=1")):
            with self.assertRaisesRegex(ValueError, f"{message}.*\\[0, {len(WORDS)}\\)"):
                model.generate("w1 w2", max_length=6, stop_token_ids=bad)
        self.assertIsInstance(model.generate("w1 w2", max_length=6, stop_token_ids=(1,)), str)

    def test_compile_refuses_an_unknown_sampler(self):
        model = _task()
        with self.assertRaisesRegex(ValueError, r"compile\(sampler='nonsense'\): expected one "
                                                r"of \('greedy', 'top_k'"):
            model.compile(sampler="nonsense")
        with self.assertRaisesRegex(ValueError, r"got a int: expected one of"):
            model.compile(sampler=3)


class ScoreTextTest(testing.TestCase):

    def test_an_empty_text_is_refused_as_the_saved_model_does(self):
        model = _task()
        with self.assertRaisesRegex(ValueError, r"^`texts` holds an empty string \(nothing to "
                                                r"score\), at indices: \[1\]$"):
            model.score_text(["w1 w2", ""])
        self.assertEqual(model.score_text("w1 w2")["num_tokens"].tolist(), [3])
