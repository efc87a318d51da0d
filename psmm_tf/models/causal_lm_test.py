"""The tasks as keras-hub CausalLMs: compile/fit, predict, generate, presets; every backend."""

import importlib.util
import json
import os
import shutil
import unittest
import zipfile

import keras
import keras_hub
import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from keras import ops

from psmm_tf import configs, testing
from psmm_tf import workdir as run_files
from psmm_tf.data import Vocabulary
from psmm_tf.models import (
    InputOutputGateLM,
    LanguageModelPreprocessor,
    LSTMBackbone,
    LSTMLanguageModel,
    PointerSentinelLM,
    PointerSoftmaxLM,
    WordTokenizer,
)

WORDS = testing.TINY_WORDS
TASKS = (("psmm", PointerSentinelLM), ("lstm", LSTMLanguageModel),
         ("pointer_softmax", PointerSoftmaxLM))
_task = testing.tiny_task
_ids = testing.random_ids


def _trained_looking(model, rng):
    """`model` with random trainable weights (not those its seeds start from), returned."""
    for weight in model.trainable_weights:
        weight.assign(rng.normal(0.0, 0.3, size=weight.shape).astype("float32"))
    return model


def _cycles(rows, steps):
    """Each row repeats a cycle of 3 words (rows start on different words): a softmax and a
    pointer both learn it in a few steps."""
    text = 2 + (3 * np.arange(rows)[:, None] + np.arange(steps + 1)[None, :] % 3) % 20
    return text[:, :-1].astype("int32"), text[:, 1:].astype("int32")


class CausalLMTest(testing.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(*TASKS)
    def test_fit_with_the_default_compile_lowers_the_loss(self, cls):
        model = _task(cls)
        x, y = _cycles(8, 10)
        before = [np.array(w) for w in model.trainable_weights]
        model.compile(optimizer=keras.optimizers.Adam(0.02))
        history = model.fit(x, y, batch_size=4, epochs=8, verbose=0).history
        # The loss is the mixture's NLL averaged over targets (log V = 3.09 for a uniform
        # guess; the pointer's copies make PSMM's lower from the first epoch): never 0, it
        # falls, the perplexity metric reads it, and every weight moves.
        self.assertGreater(history["loss"][0], 1.0)
        self.assertLess(history["loss"][-1], history["loss"][0] - 0.25)
        self.assertAllClose(history["perplexity"], np.exp(history["loss"]), rtol=0.05)
        for old, weight in zip(before, model.trainable_weights):
            self.assertNotAllClose(old, weight, msg=weight.path)

    @parameterized.named_parameters(*TASKS)
    def test_one_fit_step_is_the_projects_training_step(self, cls):
        # fit averages the objective over the targets, psmm-train sums it over each window's T
        # targets and averages over the rows: SGD at T x the rate takes the same step.
        rows, steps, rate = 2, 5, 0.05
        model, reference = _task(cls, dropout=0.0), _task(cls, dropout=0.0)
        reference.set_weights(model.get_weights())
        x, y = _ids(self.rng, rows, steps)
        model.compile(optimizer=keras.optimizers.SGD(rate * steps), weighted_metrics=[])
        model.fit(x, y, batch_size=rows, epochs=1, shuffle=False, verbose=0)
        batch = {"token_ids": x, "token_mask": np.ones_like(x, bool), "targets": y,
                 "target_weights": np.ones(y.shape, "float32")}
        _project_step(reference, keras.optimizers.SGD(rate), batch)
        for a, b in zip(model.trainable_weights, reference.trainable_weights):
            self.assertAllClose(a, b, atol=1e-5, msg=a.path)

    def test_fit_is_compiled_on_jax_by_default_with_the_uncompiled_numbers(self):
        # JAX: the default compile leaves Keras's "auto" (jax.jit); TensorFlow: False (the
        # native kernels run outside XLA). Either way, the compiled step is the eager one.
        model, reference = _task(dropout=0.0), _task(dropout=0.0)
        reference.set_weights(model.get_weights())
        model.compile(optimizer=keras.optimizers.SGD(0.5))
        self.assertEqual(model.jit_compile, keras.backend.backend() == "jax")
        compiled = not model.jit_compile  # the other mode, on TensorFlow XLA
        model.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=not compiled)
        reference.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=compiled)
        self.assertNotEqual(model.jit_compile, reference.jit_compile)
        # Two epochs of one step each: the uncompiled JAX step (op by op, its scan traced
        # again on every call) is the slow one, so it takes as few steps as show two updates.
        x, y = _ids(self.rng, 4, 6)
        losses = [m.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"]
                  for m in (model, reference)]
        self.assertAllClose(losses[0], losses[1], rtol=1e-5)
        for a, b in zip(model.trainable_weights, reference.trainable_weights):
            self.assertAllClose(a, b, atol=1e-5, msg=a.path)
        # A file saved compiled is loaded with the loading backend's default.
        path = os.path.join(self.get_temp_dir(), "model.keras")
        reference.save(path)
        self.assertEqual(keras.saving.load_model(path).jit_compile,
                         keras.backend.backend() == "jax")

    def test_fit_reads_dicts_strings_and_datasets(self):
        model = _task()
        model.compile(optimizer=keras.optimizers.Adam(0.01))
        x, y = _ids(self.rng, 4, 10)
        mask = np.ones_like(x, bool)
        mask[:, 7:] = False  # padding: its targets carry no weight
        y_padded = np.where(mask, y, 0)
        loss_dict = model.evaluate({"token_ids": x, "padding_mask": mask}, y_padded, verbose=0,
                                   return_dict=True)["loss"]
        loss_cut = model.evaluate(x[:, :7], y[:, :7], verbose=0, return_dict=True)["loss"]
        self.assertAllClose(loss_dict, loss_cut, rtol=1e-5)
        texts = ["w1 w2 w3 w1 w2 w3\nw4 w5", "w6 w7 w6 w7 w6 w7"]
        history = model.fit(texts, batch_size=2, epochs=2, verbose=0).history
        self.assertLen(history["loss"], 2)
        # A tf.data pipeline of strings mapped by the preprocessor, and one of ids.
        strings = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(model.preprocessor)
        self.assertLen(model.fit(strings, epochs=1, verbose=0).history["loss"], 1)
        ids = tf.data.Dataset.from_tensor_slices((x, y)).batch(2)
        self.assertLen(model.fit(ids, epochs=1, verbose=0).history["loss"], 1)

    def test_fit_names_ids_outside_the_vocabulary(self):
        model = _task()
        x, y = _ids(self.rng, 2, 5)
        with self.assertRaisesRegex(ValueError, r"`target_ids` holds the id 22, outside"):
            model.fit(x, np.where(y == y[0, 0], len(WORDS), y), verbose=0)
        with self.assertRaisesRegex(ValueError, r"`token_ids` holds the id -1"):
            model.evaluate({"token_ids": x - 10, "padding_mask": np.ones_like(x, bool)}, y,
                           verbose=0)

    @parameterized.named_parameters(*TASKS)
    def test_predict_and_logits_are_the_mixture_log_probabilities(self, cls):
        model = _task(cls)
        x, y = _ids(self.rng, 2, 9)
        log_p = model.predict(x, verbose=0)
        self.assertEqual(log_p.shape, (2, 9, len(WORDS)))
        self.assertAllClose(np.exp(log_p).sum(-1), np.ones((2, 9)), atol=1e-5)
        outputs = model(x, training=False)
        self.assertAllClose(np.exp(log_p), model.distribution(outputs), atol=1e-6)
        # The same numbers as score's log-probabilities of the targets, and its logits mode.
        picked = np.take_along_axis(log_p, y[..., None], -1)[..., 0]
        self.assertAllClose(picked, model.score_with_state(x, y)["log_probs"], atol=1e-5)
        self.assertAllClose(model.score_with_state(x, scoring_mode="logits")["logits"], log_p,
                            atol=1e-5)
        with self.assertRaisesRegex(ValueError, "needs target_ids"):
            model.score_with_state(x)

    def test_score_has_keras_hubs_signature_and_returns_a_tensor(self):
        # keras-hub's `score(token_ids, padding_mask, scoring_mode="logits", ...,
        # target_ids=None)`: a user's `score(ids, mask)` reads the mask as the mask.
        model = _task()
        x, y = _ids(self.rng, 2, 7)
        mask = np.ones_like(x, bool)
        mask[1, 4:] = False
        logits = np.asarray(model.score(x, mask))
        self.assertEqual(logits.shape, (2, 7, len(WORDS)))
        # Against predict (another path): the first row whole, the second up to its padding,
        # and 0 in the padding.
        log_p = model.predict({"token_ids": x, "padding_mask": mask}, verbose=0)
        self.assertAllClose(logits[0], log_p[0], atol=1e-5)
        self.assertAllClose(logits[1, :4], log_p[1, :4], atol=1e-5)
        self.assertAllEqual(logits[1, 4:], np.zeros((3, len(WORDS))))
        loss = np.asarray(model.score(x, mask, scoring_mode="loss", target_ids=y))
        picked = -np.take_along_axis(log_p, y[..., None], -1)[..., 0]
        self.assertAllClose(loss, np.where(mask, picked, 0.0), atol=1e-5)
        unmasked = model.predict(x, verbose=0)
        self.assertAllClose(model.score(x, scoring_mode="log_probs", target_ids=y),
                            np.take_along_axis(unmasked, y[..., None], -1)[..., 0], atol=1e-5)
        with self.assertRaisesRegex(ValueError, r"'loss' needs target_ids"):
            model.score(x, mask, scoring_mode="loss")
        with self.assertRaisesRegex(ValueError, r"layer_intercept_fn=...\) is not supported"):
            model.score(x, layer_intercept_fn=lambda h, i: h)
        # keras-hub's default mask is float ones: a mask of numbers 0 and 1 reads as bool.
        for numbers in (mask.astype("float32"), mask.astype("int32"),
                        ops.cast(mask, "bfloat16")):
            self.assertAllClose(model.score(x, numbers), logits, atol=1e-6)
        with self.assertRaisesRegex(ValueError, r"`padding_mask` must be bool or hold only 0 "
                                                r"and 1, got dtype int\d+ holding \[\d+"):
            model.score(x, y + 2)  # ids in the mask's place: refused, not scored
        with self.assertRaisesRegex(ValueError, r"holding \[0.5\]"):
            model.score(x, np.full(x.shape, 0.5, "float32"))

    # PSMM (the mixture) and the gate model (ScoringMixin outside LanguageModel); the other tasks
    # share PSMM's scoring path.
    @parameterized.named_parameters(("psmm", PointerSentinelLM),
                                    ("input_output_gate", "input_output_gate"))
    def test_score_inside_a_callers_compiled_function_equals_the_eager_score(self, cls):
        if cls == "input_output_gate":
            model = InputOutputGateLM(_trained_looking(_task(), self.rng), embedding_dim=8)
        else:
            model = _trained_looking(_task(cls), self.rng)
        x, y = (ids.copy() for ids in _ids(self.rng, 2, 7))  # views of one text: copies
        mask = np.ones_like(x, bool)
        mask[1, 4:] = False
        # Padding may hold any id (as the eager path allows): outside the vocabulary here.
        x[1, 4:], y[1, 4:] = len(WORDS) + 3, -1

        def scores(ids, padding_mask, targets):
            return (model.score(ids, padding_mask),
                    model.score(ids, padding_mask, scoring_mode="loss", target_ids=targets))

        callers = testing.compiled(scores, jit_compile=False)
        for got, expected in zip(callers(x, mask, y), scores(x, mask, y), strict=True):
            self.assertAllClose(got, expected, atol=1e-5)
        self.assertAllClose(
            testing.compiled(lambda ids, targets: model.score(
                ids, scoring_mode="log_probs", target_ids=targets), jit_compile=False)(
                    x[:1], y[:1]),
            model.score(x[:1], scoring_mode="log_probs", target_ids=y[:1]), atol=1e-5)

    def test_score_inside_a_callers_compiled_function_checks_shapes_and_dtypes(self):
        model = _task()
        x, y = _ids(self.rng, 2, 7)

        def traced(function, *args):
            return testing.compiled(function, jit_compile=False)(*args)

        with self.assertRaisesRegex(ValueError, r"`token_ids` has dtype float32 and shape "
                                                r"\(2, 7\): expected int values of shape "
                                                r"\(batch_size, T\)"):
            traced(model.score, x.astype("float32"))
        with self.assertRaisesRegex(ValueError, r"`target_ids` has dtype int32 and shape "
                                                r"\(14,\): expected int values of shape "
                                                r"token_ids' \(2, 7\)"):
            traced(lambda ids, targets: model.score(
                ids, scoring_mode="loss", target_ids=ops.reshape(targets, (-1,))), x, y)
        with self.assertRaisesRegex(ValueError, r"`padding_mask` has dtype bool and shape "
                                                r"\(2, 6\)"):
            traced(lambda ids: model.score(ids, np.ones((2, 6), bool)), x)
        with self.assertRaisesRegex(ValueError, r"`token_ids` has dtype int32 and shape "
                                                r"\(2, 0\): .* T >= 1"):
            traced(model.score, x[:, :0])
        with self.assertRaisesRegex(ValueError, r"'loss' needs target_ids"):
            traced(lambda ids: model.score(ids, scoring_mode="loss"), x)

    @unittest.skipIf(keras.backend.backend() != "tensorflow", "TensorFlow's input signatures")
    def test_score_in_a_tf_function_of_unknown_batch_and_length(self):
        model = _trained_looking(_task(), self.rng)
        x, y = _ids(self.rng, 3, 9)
        any_ids = tf.TensorSpec([None, None], tf.int32)
        score = tf.function(lambda ids, targets: model.score(
            ids, scoring_mode="log_probs", target_ids=targets), input_signature=[any_ids] * 2)
        for rows, steps in ((3, 9), (1, 4)):
            self.assertAllClose(score(x[:rows, :steps], y[:rows, :steps]),
                                model.score(x[:rows, :steps], scoring_mode="log_probs",
                                            target_ids=y[:rows, :steps]), atol=1e-5)
        unknown_rank = tf.function(lambda ids: model.score(ids),
                                   input_signature=[tf.TensorSpec(None, tf.int32)])
        with self.assertRaisesRegex(ValueError, r"`token_ids` has dtype int32 and shape None"):
            unknown_rank(x)

    @parameterized.named_parameters(*TASKS)
    def test_greedy_generate_is_the_argmax_of_the_full_sequence_mixture(self, cls):
        model = _task(cls)
        model.compile(sampler="greedy")
        model.preprocessor = None  # keras-hub's convention: ids in, ids out
        prompts = {"token_ids": np.zeros((2, 14), "int32"), "padding_mask": np.zeros((2, 14),
                                                                                     bool)}
        prompts["token_ids"][0, :5] = [1, 2, 3, 4, 2]
        prompts["token_ids"][1, :3] = [1, 5, 6]
        prompts["padding_mask"][0, :5] = prompts["padding_mask"][1, :3] = True
        out = model.generate(dict(prompts), stop_token_ids=None)
        ids = np.asarray(out["token_ids"])
        self.assertAllEqual(ids[0, :5], prompts["token_ids"][0, :5])  # prompts kept
        self.assertAllEqual(ids[1, :3], prompts["token_ids"][1, :3])
        log_p = model.score_with_state(ids[:, :-1], scoring_mode="logits")["logits"]
        for row, start in ((0, 5), (1, 3)):
            self.assertAllEqual(ids[row, start:], np.argmax(log_p[row, start - 1:], -1))

    def test_generate_copies_a_word_seen_only_in_the_prompt(self):
        # With the gate pinned near 0 the mixture is the pointer's: every word generated
        # greedily comes from the window, whatever the untrained softmax prefers.
        model = _task(PointerSentinelLM, gate_calibration=(0.0, -30.0))
        model.compile(sampler="greedy")
        text = model.generate("w17 w3 w17 w3", max_length=12, stop_token_ids=None)
        generated = text.split()[4:]
        self.assertLen(generated, 7)
        self.assertTrue(set(generated) <= {"w17", "w3"}, text)
        # Without the pointer's say the untrained softmax produces other words.
        model.set_gate_calibration((0.0, 30.0))
        self.assertFalse(set(model.generate("w17 w3 w17 w3", max_length=12,
                                            stop_token_ids=None).split()[4:]) <= {"w17", "w3"})

    def test_generate_reads_and_copies_prompt_words_outside_the_vocabulary(self):
        # "zebra" and "gnu" are not in the vocabulary: read as <unk>, kept as the keys' words,
        # so the pointer (the gate pinned near 0) copies them; the prompt is echoed as given.
        model = _task(PointerSentinelLM, gate_calibration=(0.0, -30.0))
        for sampler in ("greedy", "beam"):
            model.compile(sampler=sampler)
            texts = model.generate(["zebra w3 gnu zebra", "w5 gnu"], max_length=12,
                                   stop_token_ids=None)
            self.assertTrue(texts[0].startswith("zebra w3 gnu zebra "), texts)
            self.assertEqual(texts[1].split()[:2], ["w5", "gnu"], texts)
            self.assertTrue(set(texts[0].split()[4:]) <= {"zebra", "w3", "gnu"}, texts)
            self.assertIn("zebra", texts[0].split()[4:])
            self.assertTrue(set(texts[1].split()) <= {"w5", "gnu"}, texts)
        # strip_prompt: the generated words alone, the same ones.
        model.compile(sampler="greedy")
        prompt = "zebra w3 gnu zebra"
        full = model.generate(prompt, max_length=9, stop_token_ids=None)
        generated = model.generate(prompt, max_length=9, stop_token_ids=None,
                                   strip_prompt=True)
        self.assertEqual(prompt.split() + generated.split(), full.split())
        self.assertLen(generated.replace("\n", " \n ").split(), 4)  # 9 - <eos> - 4 words
        # Prompts held in a NumPy array or a string tensor keep those words too.
        prompts = ["zebra w3 gnu zebra", "w5 gnu"]
        texts = model.generate(prompts, max_length=12, stop_token_ids=None)
        for held in (np.array(prompts), np.array(prompts, dtype=object),
                     np.array([p.encode() for p in prompts]), [p.encode() for p in prompts]):
            self.assertEqual(model.generate(held, max_length=12, stop_token_ids=None), texts)
        for held in (np.array(prompts[0]), prompts[0].encode()):
            self.assertEqual(model.generate(held, max_length=12, stop_token_ids=None), texts[0])
        if keras.backend.backend() == "tensorflow":
            self.assertEqual(model.generate(tf.constant(prompts), max_length=12,
                                            stop_token_ids=None), texts)
            self.assertEqual(model.generate(tf.constant(prompts[0]), max_length=12,
                                            stop_token_ids=None), texts[0])

    def test_strip_prompt_gives_the_text_paths_words_for_tensors_datasets_and_ids(self):
        # keras-hub's own path (a string tensor, a dataset; ids without a preprocessor) strips
        # the prompt as the text path does: every generated word, the first one included.
        model = _trained_looking(_task(dropout=0.0), self.rng)
        model.compile(sampler="greedy")
        prompts = ["w1 w2 w3", "w4 w5\nw6 w7 w8"]
        full = model.generate(prompts, max_length=10, stop_token_ids=None)
        generated = model.generate(prompts, max_length=10, stop_token_ids=None,
                                   strip_prompt=True)
        for prompt, text, words in zip(prompts, full, generated):
            self.assertEqual(prompt.split() + words.split(), text.split())
        dataset = tf.data.Dataset.from_tensor_slices(prompts).batch(1)
        for inputs in (tf.constant(prompts), dataset):
            self.assertEqual(model.generate(inputs, max_length=10, stop_token_ids=None,
                                            strip_prompt=True), generated)
        self.assertEqual(model.generate(tf.constant(prompts[1]), max_length=10,
                                        stop_token_ids=None, strip_prompt=True), generated[1])
        ids = model.preprocessor.generate_preprocess(prompts, sequence_length=10)
        ids = {name: np.asarray(value) for name, value in ids.items()}
        preprocessor, model.preprocessor = model.preprocessor, None
        out = model.generate(ids, stop_token_ids=None, strip_prompt=True)
        model.preprocessor = preprocessor
        self.assertEqual(preprocessor.generate_postprocess(out, prompt_included=False),
                         generated)
        # One unbatched prompt (keras-hub's round trip of one string) gives one string.
        one = preprocessor.generate_preprocess(prompts[1], sequence_length=10)
        self.assertEqual(ops.shape(one["token_ids"]), (10,))
        self.assertEqual(preprocessor.generate_postprocess(one), prompts[1])

    def test_the_open_vocabulary_distribution_is_the_mixture_over_the_extra_ids(self):
        # Brute force: p(V + j) is the attention on the keys holding extra word j, p(<unk>)
        # the softmax's alone (no key is a literal <unk>), and each row sums to 1.
        model = _task(PointerSentinelLM)
        size = len(WORDS)
        key_ids = np.array([[1, size, 3, size + 1, size, 4]], "int32")
        read = np.where(key_ids >= size, 0, key_ids)
        outputs = model(read, key_ids=key_ids)
        p = np.exp(ops.convert_to_numpy(model.log_distribution(outputs, extra_ids=6)))
        attention = ops.convert_to_numpy(outputs["attention"])[0]  # (T, K)
        gate = ops.convert_to_numpy(outputs["gate"])[0]
        softmax = ops.convert_to_numpy(ops.softmax(outputs["vocab_logits"]))[0]
        expected = np.zeros((6, size + 6))
        expected[:, :size] = gate[:, None] * softmax
        for key, word in enumerate(key_ids[0]):
            expected[:, word] += attention[:, key]
        self.assertAllClose(p[0], expected, atol=1e-6)
        self.assertAllClose(p.sum(-1), np.ones((1, 6)), atol=1e-5)
        self.assertGreater(p[0, 5, size], 0.0)

    def test_a_sampler_set_after_compile_is_used(self):
        class Always7(keras_hub.samplers.Sampler):
            def get_next_token(self, probabilities):
                return ops.full(ops.shape(probabilities)[:1], 7, "int32")

        model = _task()
        model.compile(sampler="greedy")
        first = model.generate("w1 w2", max_length=7, stop_token_ids=None)
        model.sampler = Always7()
        self.assertEqual(model.generate("w1 w2", max_length=7, stop_token_ids=None),
                         "w1 w2 w5 w5 w5 w5")  # id 7 is w5
        model.sampler = "greedy"
        self.assertEqual(model.generate("w1 w2", max_length=7, stop_token_ids=None), first)
        with self.assertRaisesRegex(ValueError, r"compile\(sampler='nope'\): expected one of"):
            model.sampler = "nope"

    def test_stock_keras_losses_average_over_the_targets_as_the_default(self):
        # Padding carries no weight: a stock sparse cross-entropy (logits, probabilities or
        # its name) gives the default loss's number, not one divided by every position.
        model = _task()
        x, y = _ids(self.rng, 2, 8)
        mask = np.ones_like(x, bool)
        mask[1, 3:] = False
        data = ({"token_ids": x, "padding_mask": mask}, np.where(mask, y, 0))
        model.compile()
        default = model.evaluate(*data, verbose=0, return_dict=True)["loss"]
        log_p = model.predict(data[0], verbose=0)
        nll = -np.take_along_axis(log_p, y[..., None], -1)[..., 0]
        self.assertAllClose(default, nll[mask].mean(), rtol=1e-5)
        for loss in (keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     keras.losses.SparseCategoricalCrossentropy(),
                     "sparse_categorical_crossentropy"):
            model.compile(loss=loss)
            self.assertAllClose(model.evaluate(*data, verbose=0, return_dict=True)["loss"],
                                default, rtol=1e-4, msg=str(loss))

    def test_contrastive_search_penalises_as_keras_hubs_does_by_brute_force(self):
        model = _trained_looking(_task(dropout=0.0), self.rng)
        prompt = "w1 w2 w3"
        # alpha 0: the most probable of the k candidates, greedy search.
        model.compile(sampler=keras_hub.samplers.ContrastiveSampler(k=3, alpha=0.0))
        contrastive = model.generate(prompt, max_length=9, stop_token_ids=None)
        model.compile(sampler="greedy")
        self.assertEqual(contrastive, model.generate(prompt, max_length=9, stop_token_ids=None))
        # alpha 1: of the k most probable next words, the one whose hidden state is least like
        # (cosine) the state after any word so far, the start token and the prompt's last word
        # included (Su et al. 2022).
        def read(token_ids):
            outputs = model(token_ids, state=model.zero_state(1), memory=model.empty_memory(1),
                            training=False)
            return (ops.convert_to_numpy(model.log_distribution(outputs)[0, -1]),
                    ops.convert_to_numpy(outputs["hidden"][0]))

        prompts = [" ".join(f"w{i}" for i in self.rng.integers(0, 20, size=n)) for n in (1, 3, 5)]
        for k in (4, 8):
            model.compile(sampler=keras_hub.samplers.ContrastiveSampler(k=k, alpha=1.0))
            for prompt in prompts:
                ids = np.asarray(model.preprocessor.generate_preprocess(
                    [prompt], sequence_length=len(prompt.split()) + 1)["token_ids"], "int32")
                log_p, seen = read(ids)

                def max_similarity(candidate, ids=ids, seen=seen):
                    state = read(np.concatenate([ids, [[candidate]]], axis=1))[1][-1]
                    return np.max(seen @ state
                                  / (np.linalg.norm(seen, axis=1) * np.linalg.norm(state)))

                expected = min(np.argsort(-log_p)[:k], key=max_similarity)
                inputs = {"token_ids": np.concatenate([ids, [[0]]], axis=1),
                          "padding_mask": np.arange(ids.shape[1] + 1)[None] < ids.shape[1]}
                preprocessor, model.preprocessor = model.preprocessor, None
                out = model.generate(inputs, stop_token_ids=None)
                model.preprocessor = preprocessor
                self.assertAllEqual(out["token_ids"][0, :-1], ids[0])
                self.assertEqual(int(out["token_ids"][0, -1]), expected, f"k={k}: {prompt}")

    @parameterized.named_parameters(("greedy", "greedy"), ("top_k", "top_k"),
                                    ("top_p", "top_p"), ("random", "random"),
                                    ("beam", "beam"), ("contrastive", "contrastive"))
    def test_every_sampler_generates_from_strings(self, sampler):
        model = _task()
        model.compile(sampler=sampler)
        texts = model.generate(["w1 w2 w3", "w4"], max_length=9)
        self.assertLen(texts, 2)
        self.assertTrue(texts[0].startswith("w1 w2 w3"), texts[0])
        self.assertLessEqual(len(texts[1].split()), 8)
        self.assertTrue(set(" ".join(texts).split()) <= set(WORDS[2:]), texts)

    def test_from_preset_loads_a_saved_preset_and_a_run_folder(self):
        model = _trained_looking(_task(), self.rng)
        model.set_gate_calibration((0.5, 0.25))
        preset = os.path.join(self.get_temp_dir(), "preset")
        model.save_to_preset(preset)
        with self.assertRaisesRegex(FileExistsError, "never replaces"):
            model.save_to_preset(preset)
        run = os.path.join(self.get_temp_dir(), "run")
        os.makedirs(run)
        model.save(os.path.join(run, "model.keras"))
        # A psmm-train run folder: its own config.json (the run's settings) beside model.keras.
        run_files.write_config(run, configs.get_preset("tiny"))
        for path in (preset, run, os.path.join(run, "model.keras")):
            loaded = PointerSentinelLM.from_preset(path)
            self.assertAllClose(loaded.score_text("w1 w2 w3")["log_probs"],
                                model.score_text("w1 w2 w3")["log_probs"], atol=1e-6)
            self.assertEqual(loaded.preprocessor.vocabulary, Vocabulary(WORDS))
            self.assertEqual(tuple(loaded.pointer.gate_calibration), (0.5, 0.25))
            # load_weights=False: the architecture and vocabulary, the initial weights, no
            # calibration (fitted to the trained weights).
            fresh = PointerSentinelLM.from_preset(path, load_weights=False)
            self.assertIsNone(fresh.pointer.gate_calibration)
            self.assertEqual(fresh.preprocessor.vocabulary, Vocabulary(WORDS))
            self.assertAllClose(fresh.trainable_weights[0], _task().trainable_weights[0])
            self.assertNotAllClose(fresh.trainable_weights[0], model.trainable_weights[0])
            mixed = PointerSentinelLM.from_preset(path, dtype="mixed_bfloat16")
            self.assertEqual(mixed.backbone.lstm_layers[0].dtype_policy.name, "mixed_bfloat16")
            self.assertEqual(mixed.vocab_head.dtype_policy.name, "mixed_bfloat16")
            self.assertAllClose(mixed.score_text("w1 w2 w3")["log_probs"],
                                model.score_text("w1 w2 w3")["log_probs"], atol=0.1)
        for path, options in ((preset, {}), (run, {"dtype": "mixed_bfloat16"}),
                              (run, {"load_weights": False})):
            with self.assertRaisesRegex(ValueError, "holds a PointerSentinelLM, not a"):
                LSTMLanguageModel.from_preset(path, **options)
        with self.assertRaisesRegex(ValueError, "takes load_weights and dtype only"):
            PointerSentinelLM.from_preset(run, num_classes=2)
        with self.assertRaisesRegex(ValueError, "holds no config.json and no model.keras"):
            PointerSentinelLM.from_preset(self.get_temp_dir())

    def test_quantize_takes_the_embedding_and_the_head_and_saves(self):
        # keras-hub's `quantize("int8")`: the input embedding and the vocabulary head (psmm_tf's
        # Dense, Keras' quantized forms) are quantized; a `.keras` file and a preset load the
        # quantized model as it was.
        model = _trained_looking(_task(), self.rng)
        texts = ["w1 w2 w3\nw4 w5", "w6"]
        floats = model.score_text(texts)["log_probs"]
        model.preprocessor(texts)  # its tokenizer built, as keras-hub's quantize asks of GPT-2's
        model.quantize("int8")
        self.assertEqual({layer.name: layer.quantization_mode for layer in model._flatten_layers()
                          if layer.quantization_mode},
                         {"embedding": "int8", "vocab_head": "int8"})
        quantized = model.score_text(texts)["log_probs"]
        self.assertAllClose(quantized, floats, atol=0.05)
        self.assertNotAllClose(quantized, floats, atol=1e-7)
        path = os.path.join(self.get_temp_dir(), "int8.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
        self.assertEqual(loaded.vocab_head.quantization_mode, "int8")
        self.assertAllClose(loaded.score_text(texts)["log_probs"], quantized, atol=1e-6)
        preset = os.path.join(self.get_temp_dir(), "int8_preset")
        model.save_to_preset(preset)
        loaded = keras_hub.models.CausalLM.from_preset(preset)
        self.assertEqual((loaded.vocab_head.quantization_mode,
                          loaded.backbone.embedding.quantization_mode), ("int8", "int8"))
        self.assertAllClose(loaded.score_text(texts)["log_probs"], quantized, atol=1e-6)
        # Rebuilt only as it is: not under another dtype, not with new weights.
        for options in ({"dtype": "mixed_bfloat16"}, {"load_weights": False}):
            with self.assertRaisesRegex(ValueError, r"PointerSentinelLM is quantized \(embedding, "
                                                    r"vocab_head\): it is rebuilt only as it is"):
                PointerSentinelLM.from_preset(path, **options)
        # A sampled softmax's head has no quantized form (its training estimate reads the
        # kernel): the embedding alone is quantized.
        sampled = _trained_looking(_task(softmax="sampled", num_sampled=4), self.rng)
        sampled.preprocessor(texts)
        sampled.quantize("int8")
        self.assertEqual([layer.name for layer in sampled._flatten_layers()
                          if layer.quantization_mode], ["embedding"])
        self.assertIsNone(sampled.get_config().get("head_dtype"))

    def test_a_task_builds_on_a_backbones_preset(self):
        # keras-hub's way to share a backbone: its preset (and the preprocessor's) without a
        # task.json; a task's class puts a new head on it, keras-hub's base class cannot.
        model = _trained_looking(_task(), self.rng)
        preset = os.path.join(self.get_temp_dir(), "backbone_only")
        model.backbone.save_to_preset(preset)
        model.preprocessor.save_to_preset(preset)
        self.assertNotIn("task.json", os.listdir(preset))
        task = PointerSentinelLM.from_preset(preset, window_size=6)
        self.assertIs(type(task), PointerSentinelLM)
        self.assertEqual(task.window_size, 6)
        self.assertEqual(task.preprocessor.vocabulary, Vocabulary(WORDS))
        for loaded, saved in zip(task.backbone.weights, model.backbone.weights, strict=True):
            self.assertAllEqual(loaded, saved)
        self.assertEqual(len(task.score_text("w1 w2 w3")["log_probs"][0]),
                         len(model.score_text("w1 w2 w3")["log_probs"][0]))
        fresh = LSTMLanguageModel.from_preset(preset, load_weights=False)
        self.assertNotAllClose(fresh.backbone.trainable_weights[0],
                               model.backbone.trainable_weights[0])
        with self.assertRaisesRegex(ValueError, r"RecurrentCausalLM is the base of psmm_tf's "
                                    r"tasks and has no head: .* A preset without task\.json "
                                    r"\(a backbone's\) loads with the task's class"):
            keras_hub.models.CausalLM.from_preset(preset)

    def test_a_quantized_backbones_preset_loads_quantized(self):
        # keras-hub 0.32's backbone loader replaces the saved DTypePolicyMap by the dtype asked
        # for; LSTMBackbone.from_preset and a task built on the preset keep it.
        model = _trained_looking(_task(), self.rng)
        model.preprocessor(["w1"])
        model.quantize("int8")
        preset = os.path.join(self.get_temp_dir(), "int8_backbone")
        model.backbone.save_to_preset(preset)
        ids = np.array([[2, 5, 3, 7, 4]])
        states = model.backbone(ids)[0]
        for backbone in (LSTMBackbone.from_preset(preset),
                         PointerSentinelLM.from_preset(preset, window_size=6).backbone):
            self.assertEqual(backbone.embedding.quantization_mode, "int8")
            self.assertAllClose(backbone(ids)[0], states, atol=1e-6)
        bfloat16 = LSTMBackbone.from_preset(preset, dtype="mixed_bfloat16")
        self.assertEqual((bfloat16.embedding.quantization_mode, bfloat16.lstm_0.compute_dtype),
                         ("int8", "bfloat16"))
        self.assertAllClose(bfloat16(ids)[0], states, atol=0.05)
        policy = LSTMBackbone.from_preset(preset, dtype=keras.DTypePolicy("mixed_bfloat16"))
        self.assertEqual(policy.lstm_0.compute_dtype, "bfloat16")
        for load in (lambda: LSTMBackbone.from_preset(preset, load_weights=False),
                     lambda: PointerSentinelLM.from_preset(preset, load_weights=False)):
            with self.assertRaisesRegex(ValueError, r"holds a quantized backbone \(embedding\): "
                                                    r"it loads only with its weights"):
                load()
        with self.assertRaisesRegex(ValueError, r"has no config\.json"):
            LSTMBackbone.from_preset(self.get_temp_dir())
        # keras-hub's own backbone loader drops the saved policies: its failure names the
        # loaders that keep them.
        with self.assertRaisesRegex(ValueError, r"holds a quantized backbone \(embedding\), "
                                                r"built here without its quantized layers .*"
                                                r"LSTMBackbone\.from_preset"):
            keras_hub.models.Backbone.from_preset(preset)

    def test_a_built_task_takes_a_new_preprocessor_and_no_other_new_state(self):
        # keras-hub's tasks take `task.preprocessor = ...` at any time; a built subclassed
        # model is locked against new state, which the preprocessor (no weights) is not.
        model = _task()
        count, old = len(model.weights), model.preprocessor
        model.preprocessor = LanguageModelPreprocessor(model.preprocessor.tokenizer,
                                                       sequence_length=5)
        self.assertLen(model.weights, count)
        self.assertEqual(model.preprocessor.sequence_length, 5)
        self.assertNotIn(old, model._flatten_layers())
        self.assertEqual(model.preprocessor(["w1 w2 w3 w4 w5 w6 w7"])[0]["token_ids"].shape,
                         (1, 5))
        path = os.path.join(self.get_temp_dir(), "new_preprocessor.keras")
        model.save(path)
        self.assertEqual(keras.saving.load_model(path).preprocessor.sequence_length, 5)
        with self.assertRaisesRegex(ValueError, "cannot add new elements of state"):
            model.extra = keras.layers.Dense(3)
        dense = keras.layers.Dense(3)
        dense.build((None, 4))
        with self.assertRaisesRegex(ValueError, "preprocessor holds no weights; Dense has 2"):
            model.preprocessor = dense

    def test_a_preset_saved_under_a_mixed_policy_loads(self):
        # keras-hub 0.32's rule for an unasked dtype reads "mixed_bfloat16" as a dtype and
        # fails: the preset records its variables' float dtype, which every loader reads (under
        # the global policy, as keras-hub loads a float preset), and psmm_tf's loaders read a
        # preset that records the mixed policy (written before) the same way.
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy("mixed_bfloat16")
        try:
            model = _trained_looking(_task(), self.rng)
        finally:
            keras.config.set_dtype_policy(previous)
        preset = os.path.join(self.get_temp_dir(), "mixed_preset")
        model.save_to_preset(preset)
        backbone_preset = os.path.join(self.get_temp_dir(), "mixed_backbone")
        model.backbone.save_to_preset(backbone_preset)
        before = testing.snapshot(preset)  # a backbone never replaces a preset's (or run's) files
        with self.assertRaisesRegex(FileExistsError, r"config.json exists: save_to_preset never "
                                                     r"replaces a file"):
            model.backbone.save_to_preset(preset)
        self.assertEqual(testing.snapshot(preset), before)
        recorded = os.path.join(self.get_temp_dir(), "recorded_mixed")
        shutil.copytree(preset, recorded)
        with open(os.path.join(recorded, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["config"]["dtype"]["config"]["name"], "float32")
        config["config"]["dtype"]["config"]["name"] = "mixed_bfloat16"
        with open(os.path.join(recorded, "config.json"), "w") as f:
            json.dump(config, f)
        texts = ["w1 w2 w3 w4"]
        for loaded, compute in ((PointerSentinelLM.from_preset(preset), "float32"),
                                (keras_hub.models.CausalLM.from_preset(preset), "float32"),
                                (PointerSentinelLM.from_preset(recorded), "float32"),
                                (PointerSentinelLM.from_preset(preset, dtype="mixed_bfloat16"),
                                 "bfloat16")):
            self.assertIsInstance(loaded, PointerSentinelLM)
            self.assertEqual(loaded.backbone.lstm_0.compute_dtype, compute)
            self.assertAllClose(loaded.score_text(texts)["log_probs"],
                                model.score_text(texts)["log_probs"], atol=0.05)
        for path in (preset, recorded, backbone_preset):
            self.assertEqual(LSTMBackbone.from_preset(path).dtype_policy.name, "float32")
        self.assertEqual(keras_hub.models.Backbone.from_preset(backbone_preset).dtype_policy.name,
                         "float32")

    def test_a_presets_gate_calibration_comes_with_its_weights_only(self):
        # keras-hub's own loader reads the head's weights only with load_weights=True; the
        # calibration, fitted to those weights, is kept beside them, not in task.json.
        import h5py

        model = _trained_looking(_task(), self.rng)
        model.set_gate_calibration((0.5, 0.25))
        preset = os.path.join(self.get_temp_dir(), "calibrated")
        model.save_to_preset(preset)
        task_file = os.path.join(preset, "task.json")
        with open(task_file) as f:
            self.assertIsNone(json.load(f)["config"]["gate_calibration"])
        loaded = keras_hub.models.CausalLM.from_preset(preset)
        self.assertEqual(tuple(loaded.pointer.gate_calibration), (0.5, 0.25))
        self.assertAllClose(loaded.score_text("w1 w2 w3")["log_probs"],
                            model.score_text("w1 w2 w3")["log_probs"], atol=1e-6)
        fresh = keras_hub.models.CausalLM.from_preset(preset, load_weights=False)
        self.assertIsNone(fresh.pointer.gate_calibration)
        # A preset that holds the calibration in task.json and not in its weights file (as
        # release 0.2.0 wrote them) loads with it.
        with open(task_file) as f:
            task = json.load(f)
        task["config"]["gate_calibration"] = [0.75, -0.5]
        with open(task_file, "w") as f:
            json.dump(task, f)
        with h5py.File(os.path.join(preset, "task.weights.h5"), "a") as f:
            del f.attrs["psmm_tf_gate_calibration"]
        older = keras_hub.models.CausalLM.from_preset(preset)
        self.assertEqual(tuple(older.pointer.gate_calibration), (0.75, -0.5))
        # A damaged attribute is refused naming the file, before any weight is read.
        weights_file = os.path.join(preset, "task.weights.h5")
        for damaged in (0.5, [0.5], [1.0, 2.0, 3.0], [float("nan"), 0.0], [-1.0, 0.0], "x"):
            with h5py.File(weights_file, "a") as f:
                f.attrs["psmm_tf_gate_calibration"] = damaged
            with self.subTest(damaged=damaged), self.assertRaisesRegex(
                    ValueError, r"task\.weights\.h5: its psmm_tf_gate_calibration attribute is "
                    r"not a gate calibration: expected a pair \(scale, bias\) of finite numbers "
                    r"with scale >= 0, found"):
                keras_hub.models.CausalLM.from_preset(preset)
            before = [w.numpy() for w in older.weights]
            with self.assertRaises(ValueError):
                older.load_task_weights(weights_file)
            self.assertEqual(tuple(older.pointer.gate_calibration), (0.75, -0.5))
            for weight, value in zip(older.weights, before):
                self.assertAllEqual(weight, value)
        # An uncalibrated model's preset loads uncalibrated.
        model.set_gate_calibration(None)
        plain = os.path.join(self.get_temp_dir(), "plain")
        model.save_to_preset(plain)
        self.assertIsNone(keras_hub.models.CausalLM.from_preset(plain).pointer.gate_calibration)

    @parameterized.named_parameters(*TASKS)
    def test_keras_hubs_loaders_open_a_saved_preset(self, cls):
        model = _trained_looking(_task(cls), self.rng)
        preset = os.path.join(self.get_temp_dir(), "preset")
        model.save_to_preset(preset)
        # keras-hub's layout: configs, the backbone's and the head's weights, the tokenizer's
        # asset, and the metadata naming the task keras-hub lists for the backbone.
        self.assertEqual(sorted(os.listdir(preset)),
                         ["assets", "config.json", "metadata.json", "model.weights.h5",
                          "preprocessor.json", "task.json", "task.weights.h5", "tokenizer.json"])
        self.assertEqual(os.listdir(os.path.join(preset, "assets", "tokenizer")),
                         ["vocabulary.txt"])
        with open(os.path.join(preset, "metadata.json")) as f:
            metadata = json.load(f)
        self.assertEqual(metadata["tasks"], ["CausalLM"])
        self.assertEqual(metadata["class_name"], cls.__name__)
        texts = ["w1 w2 w3\nw4 w5", "w6"]
        loaded = keras_hub.models.CausalLM.from_preset(preset)
        self.assertIs(type(loaded), cls)
        self.assertEqual(loaded.preprocessor.vocabulary, Vocabulary(WORDS))
        self.assertAllClose(loaded.score_text(texts)["log_probs"],
                            model.score_text(texts)["log_probs"], atol=1e-6)
        fresh = keras_hub.models.CausalLM.from_preset(preset, load_weights=False)
        for weight in (fresh.backbone.trainable_weights[0], fresh.vocab_head.trainable_weights[0]):
            saved = {w.path: w for w in model.trainable_weights}[weight.path]
            self.assertNotAllClose(weight, saved, msg=weight.path)
        mixed = keras_hub.models.CausalLM.from_preset(preset, dtype="mixed_bfloat16")
        self.assertEqual(mixed.vocab_head.dtype_policy.name, "mixed_bfloat16")
        self.assertEqual(mixed.backbone.embedding.dtype_policy.name, "mixed_bfloat16")
        # Every variable in bfloat16, as keras-hub users load presets to save memory: the
        # orthogonal recurrent kernel builds (drawn in float32) and the model scores.
        low = keras_hub.models.CausalLM.from_preset(preset, dtype="bfloat16")
        self.assertEqual(low.backbone.lstm_layers[0].recurrent_kernel.dtype, "bfloat16")
        self.assertAllClose(low.score_text(texts)["log_probs"],
                            model.score_text(texts)["log_probs"], atol=0.1)
        backbone = keras_hub.models.Backbone.from_preset(preset)
        self.assertIsInstance(backbone, LSTMBackbone)
        for a, b in zip(backbone.weights, model.backbone.weights):
            self.assertAllEqual(a, b, msg=a.path)
        half = keras_hub.models.Backbone.from_preset(preset, dtype="mixed_float16")
        self.assertEqual(half.lstm_layers[1].compute_dtype, "float16")
        # The preprocessor and the tokenizer on their own, by the package's classes and by
        # keras-hub's base classes (which pick a subclass by the preset's backbone).
        for preprocessor in (LanguageModelPreprocessor.from_preset(preset),
                             keras_hub.models.CausalLMPreprocessor.from_preset(preset)):
            self.assertIsInstance(preprocessor, LanguageModelPreprocessor)
            self.assertEqual(preprocessor.sequence_length, model.preprocessor.sequence_length)
            (x, y, _), (expected_x, expected_y, _) = (preprocessor(texts),
                                                     model.preprocessor(texts))
            self.assertAllEqual(x["token_ids"], expected_x["token_ids"])
            self.assertAllEqual(y, expected_y)
        for tokenizer in (WordTokenizer.from_preset(preset),
                          keras_hub.tokenizers.Tokenizer.from_preset(preset)):
            self.assertIsInstance(tokenizer, WordTokenizer)
            self.assertEqual(tokenizer.detokenize(tokenizer.tokenize(texts[0])),
                             model.preprocessor.tokenizer.detokenize(
                                 model.preprocessor.tokenizer.tokenize(texts[0])))
            self.assertAllEqual(tokenizer.tokenize(texts[0]),
                                model.preprocessor.tokenizer.tokenize(texts[0]))

    @parameterized.named_parameters(*TASKS)
    def test_export_writes_a_saved_model_serving_predicts_mixture(self, cls):
        # Keras' export (jax2tf on JAX): `serve` takes the preprocessor's inputs and returns
        # predict's log-probabilities, pointer included, for rows of two lengths.
        model = _trained_looking(_task(cls), self.rng)
        path = os.path.join(self.get_temp_dir(), "saved_model")
        model.export(path, verbose=False)
        inputs = model.preprocessor(["w1 w2 w3 w1 w2", "w4"])[0]
        reloaded = tf.saved_model.load(path)  # held: its functions read its variables
        served = reloaded.serve(
            {name: tf.constant(ops.convert_to_numpy(value)) for name, value in inputs.items()})
        predicted = model.predict(inputs, verbose=0)
        self.assertEqual(served.shape, (2, 12, len(WORDS)))
        self.assertAllClose(served, predicted, atol=1e-5)
        self.assertAllClose(np.exp(served).sum(-1), np.ones((2, 12)), atol=1e-5)
        # A signature of one's own: the same endpoint (Keras' would return the call's dict,
        # whose state no signature can hold).
        path = os.path.join(self.get_temp_dir(), "saved_model_ids")
        model.export(path, verbose=False,
                     input_signature=[keras.InputSpec(shape=(None, 12), dtype="int32")])
        reloaded = tf.saved_model.load(path)
        served = reloaded.serve(tf.constant(ops.convert_to_numpy(inputs["token_ids"]), tf.int32))
        self.assertAllClose(served, model.predict(inputs["token_ids"], verbose=0), atol=1e-5)
        path = os.path.join(self.get_temp_dir(), "saved_model_dict")
        model.export(path, verbose=False, input_signature={
            name: keras.InputSpec(shape=(None, None), dtype=dtype)
            for name, dtype in (("token_ids", "int32"), ("padding_mask", "bool"))})
        reloaded = tf.saved_model.load(path)
        served = reloaded.serve(
            {name: tf.constant(ops.convert_to_numpy(value)) for name, value in inputs.items()})
        self.assertAllClose(served, predicted, atol=1e-5)
        with self.assertRaisesRegex(ValueError, r"takes one input .* got 2"):
            model.export(path + "_2",
                         input_signature=[keras.InputSpec(shape=(None, 12), dtype="int32")] * 2)

    def test_from_config_keeps_the_vocabulary(self):
        model = _trained_looking(_task(), self.rng)
        clone = PointerSentinelLM.from_config(model.get_config())
        self.assertEqual(clone.preprocessor.vocabulary, Vocabulary(WORDS))
        clone.set_weights(model.get_weights())
        self.assertAllClose(clone.score_text("w1 w2 w3")["log_probs"],
                            model.score_text("w1 w2 w3")["log_probs"], atol=1e-6)

    def test_saved_files_hold_the_vocabulary_once_as_the_asset(self):
        # A preset's JSON files and a .keras file's config.json leave the tokens to the
        # tokenizer's vocabulary.txt (keras-hub's way); both load with the vocabulary.
        words = [f"tok{i}x" for i in range(len(WORDS) - 2)]
        vocabulary = Vocabulary(["<unk>", "<eos>"] + words)
        model = _trained_looking(_task(), self.rng)
        model.preprocessor.set_vocabulary(vocabulary)
        texts = ["tok3x tok4x tok3x\ntok5x", "tok7x"]
        preset = os.path.join(self.get_temp_dir(), "preset")
        model.save_to_preset(preset)
        for name in ("task.json", "preprocessor.json", "tokenizer.json", "config.json",
                     "metadata.json"):
            with open(os.path.join(preset, name)) as f:
                self.assertNotIn("tok5x", f.read(), msg=name)
        with open(os.path.join(preset, "assets", "tokenizer", "vocabulary.txt")) as f:
            self.assertEqual(f.read().split("\n").count("tok5x"), 1)
        for loaded in (keras_hub.models.CausalLM.from_preset(preset),
                       PointerSentinelLM.from_preset(preset)):
            self.assertEqual(loaded.preprocessor.vocabulary, vocabulary)
            self.assertAllClose(loaded.score_text(texts)["log_probs"],
                                model.score_text(texts)["log_probs"], atol=1e-6)
        path = os.path.join(self.get_temp_dir(), "model.keras")
        model.save(path)
        with zipfile.ZipFile(path) as archive:
            held = {name: archive.read(name).decode("utf-8", "replace").count("tok5x")
                    for name in archive.namelist()}
        self.assertEqual(sum(held.values()), 1, held)
        self.assertEqual(held["assets/preprocessor/tokenizer/vocabulary.txt"], 1, held)
        loaded = keras.saving.load_model(path)
        self.assertEqual(loaded.preprocessor.vocabulary, vocabulary)
        self.assertAllClose(loaded.score_text(texts)["log_probs"],
                            model.score_text(texts)["log_probs"], atol=1e-6)
        # In memory the config still holds the tokens (`from_config(get_config())`).
        tokenizer = model.preprocessor.tokenizer
        self.assertEqual(tokenizer.get_config()["vocabulary"], list(vocabulary.tokens))
        self.assertEqual(type(tokenizer).from_config(tokenizer.get_config()).vocabulary,
                         vocabulary)

    @unittest.skipUnless(importlib.util.find_spec("tensorboard"), "pip install "
                         "\".[tensorboard]\": Keras' callback writes through it")
    def test_keras_tensorboard_callback_logs_fit(self):
        # The stock callback on a fit of texts: the loss and the perplexity of every epoch.
        from tensorflow.core.util import event_pb2

        model = _task()
        log_dir = os.path.join(self.get_temp_dir(), "logs")
        history = model.fit(["w1 w2 w3 w1", "w4 w5"] * 2, epochs=2, batch_size=2, verbose=0,
                            callbacks=[keras.callbacks.TensorBoard(log_dir)]).history
        logged = {}
        for root, _, files in os.walk(os.path.join(log_dir, "train")):
            for name in files:
                for record in tf.data.TFRecordDataset(os.path.join(root, name)):
                    event = event_pb2.Event.FromString(record.numpy())
                    for value in event.summary.value:
                        number = tf.make_ndarray(value.tensor) if value.HasField("tensor") \
                            else value.simple_value
                        logged.setdefault(value.tag, {})[event.step] = float(number)
        self.assertAllClose([logged["epoch_loss"][step] for step in (0, 1)], history["loss"])
        self.assertAllClose([logged["epoch_perplexity"][step] for step in (0, 1)],
                            history["perplexity"])

    def test_a_loaded_model_fine_tunes_with_fit(self):
        model = _task()
        path = os.path.join(self.get_temp_dir(), "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
        texts = ["w1 w2 w3 w1 w2 w3 w1 w2 w3"] * 4
        loaded.compile(optimizer=keras.optimizers.Adam(0.02))
        history = loaded.fit(texts, batch_size=4, epochs=5, verbose=0).history
        self.assertLess(history["loss"][-1], history["loss"][0])

    def test_the_tokenizer_maps_over_a_dataset_and_detokenizes(self):
        model = _task()
        tokenizer = model.preprocessor.tokenizer
        ds = tf.data.Dataset.from_tensor_slices(["w1 w2\nw3\n", "w9 nope"]).map(tokenizer)
        ids = [list(row.numpy()) for row in ds]
        self.assertEqual(ids, [[3, 4, 1, 5, 1], [11, 0, 1]])
        self.assertEqual(tokenizer.detokenize(ids[0]), "w1 w2\nw3\n")
        self.assertEqual(tokenizer.vocabulary_size(), len(WORDS))
        self.assertEqual(tokenizer.end_token_id, 1)
        self.assertEqual(model.preprocessor.sequence_length, 12)


def _project_step(model, optimizer, batch):
    """psmm-train's training step (its backend's) on one batch, without clipping."""
    rows = batch["token_ids"].shape[0]
    if keras.backend.backend() == "jax":
        from psmm_tf.jax_train_step import JaxTrainStep

        step = JaxTrainStep(model, optimizer, rows, context_length=0, use_memory=False,
                            clip_norm=1e9, pointer_clip_norm=None)
        step(batch, None, None)
        return
    from psmm_tf.training.steps import TrainStep

    step = TrainStep(model, optimizer, tf.distribute.get_strategy(), rows, context_length=0,
                     use_memory=False, clip_norm=1e9, pointer_clip_norm=None)
    state, memory = step.initial_carry()
    step({k: tf.constant(v) for k, v in batch.items()}, state, memory)
