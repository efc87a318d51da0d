"""keras-hub's shape: a backbone given to the task, a preprocessor in the .keras file, checks."""

import os

import keras
import numpy as np
from absl.testing import parameterized

from psmm_tf import testing
from psmm_tf.data import Vocabulary
from psmm_tf.models import (
    LanguageModelPreprocessor,
    LSTMBackbone,
    LSTMLanguageModel,
    PointerSentinelLM,
    PointerSoftmaxLM,
    validate_inputs,
)

WORDS = ["<unk>", "<eos>", "the", "cat", "sat", "on", "mat", "a"]


def _task(cls=PointerSentinelLM, preprocessor=True, seed=3, **kwargs):
    backbone = LSTMBackbone(len(WORDS), 6, 8, 2, zoneout=0.1, seed=seed, name="backbone")
    if preprocessor:
        kwargs["preprocessor"] = LanguageModelPreprocessor(Vocabulary(WORDS))
    return cls(backbone, window_size=4, seed=seed, **kwargs)


class TaskTest(testing.TestCase, parameterized.TestCase):

    @parameterized.named_parameters(("psmm", PointerSentinelLM), ("lstm", LSTMLanguageModel),
                                    ("pointer_softmax", PointerSoftmaxLM))
    def test_the_task_owns_its_head_and_serialises_its_backbone(self, cls):
        model = _task(cls, preprocessor=False)
        self.assertIs(model.vocab_size, model.backbone.vocab_size)
        # The output dropout is the task's; the backbone has one dropout per LSTM layer.
        self.assertLen(model.backbone.dropouts, 2)
        self.assertEqual(model.softmax_dropout.rate, 0.5)
        config = model.get_config()
        self.assertEqual(config["backbone"]["config"]["hidden_dim"], 8)
        clone = cls.from_config(config)
        clone.set_weights(model.get_weights())
        text = self.rng.integers(0, len(WORDS), size=(2, 7)).astype("int32")
        self.assertAllClose(clone.score_with_state(text[:, :-1], text[:, 1:])["log_probs"],
                            model.score_with_state(text[:, :-1], text[:, 1:])["log_probs"],
                            atol=1e-6)
        self.assertEqual(model.has_pointer, cls is not LSTMLanguageModel)

    def test_preprocessor_reads_texts_as_the_corpus_readers(self):
        preprocessor = LanguageModelPreprocessor(Vocabulary(WORDS), sequence_length=7)
        texts = ["the cat sat\na dog\n", "mat"]
        batch = preprocessor.score_inputs(texts)
        self.assertEqual(batch["tokens"], [["the", "cat", "sat", "<eos>", "a", "dog", "<eos>"],
                                           ["mat", "<eos>"]])
        self.assertAllEqual(batch["target_ids"], [[2, 3, 4, 1, 7, 0, 1], [6, 1, 0, 0, 0, 0, 0]])
        # Each text starts after an <eos>; the inputs are the targets shifted by one.
        self.assertAllEqual(batch["token_ids"], [[1, 2, 3, 4, 1, 7, 0], [1, 6, 0, 0, 0, 0, 0]])
        self.assertAllEqual(batch["padding_mask"].sum(1), [7, 2])
        # keras-hub's call (TensorFlow string ops) gives the same ids, targets and weights.
        x, y, weight = preprocessor(texts)
        # (Equal where the mask is True; padding may hold any id.)
        self.assertAllEqual(np.where(batch["padding_mask"], x["token_ids"], 0),
                            batch["token_ids"])
        # keras-hub's input mask marks the input tokens that exist: a text shorter than the
        # sequence also has its last token (whose target is padding, weight 0).
        self.assertAllEqual(np.asarray(x["padding_mask"]).sum(1), [7, 3])
        self.assertAllEqual(y, batch["target_ids"])
        self.assertAllEqual(weight, batch["padding_mask"].astype("float32"))
        with self.assertRaisesRegex(ValueError, r"`texts\[1\]` must be a str"):
            preprocessor.score_inputs(["ok", 3])

    def test_score_text_is_score_of_the_preprocessed_ids(self):
        model = _task()
        result = model.score_text(["the cat sat on the mat", "a cat"])
        batch = model.preprocessor.score_inputs(["the cat sat on the mat", "a cat"])
        scores = model.score_with_state(batch["token_ids"], batch["target_ids"],
                             padding_mask=batch["padding_mask"])
        self.assertAllClose(result["log_probs"], scores["log_probs"], atol=1e-6)
        self.assertAllEqual(result["num_tokens"], [7, 3])
        log_likelihood = np.asarray(scores["log_probs"]).sum(1)
        self.assertAllClose(result["perplexity"], np.exp(-log_likelihood / [7, 3]), rtol=1e-5)
        loss = model.score_with_state(batch["token_ids"], batch["target_ids"],
                           padding_mask=batch["padding_mask"], scoring_mode="loss")["loss"]
        self.assertAllClose(loss, -np.asarray(scores["log_probs"]), atol=1e-6)
        with self.assertRaisesRegex(ValueError, "needs a preprocessor"):
            _task(preprocessor=False).score_text("the cat")

    def test_the_preprocessor_travels_in_the_keras_file(self):
        model = _task()
        path = os.path.join(self.get_temp_dir(), "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
        self.assertEqual(loaded.preprocessor.vocabulary, Vocabulary(WORDS))
        self.assertAllClose(loaded.score_text("the cat sat")["log_probs"],
                            model.score_text("the cat sat")["log_probs"], atol=1e-6)

    @parameterized.named_parameters(("keras_init", None), ("uniform", 0.1))
    def test_the_head_does_not_start_as_a_copy_of_the_embedding(self, init_scale):
        backbone = LSTMBackbone(len(WORDS), 8, 8, 1, seed=3, init_scale=init_scale)
        model = LSTMLanguageModel(backbone, window_size=4, seed=3)
        embedding = np.asarray(model.backbone.embedding.embeddings).ravel()
        head = np.asarray(model.vocab_head.kernel).ravel()
        # Both are uniform draws of the same size; from one seed they correlated 1.000.
        self.assertLess(abs(np.corrcoef(embedding, head)[0, 1]), 0.3)

    def test_the_pointer_softmax_is_seeded_and_has_no_sentinel_settings(self):
        def pointer_weights(seed):
            model = _task(PointerSoftmaxLM, preprocessor=False, seed=seed)
            return [np.asarray(w) for w in model.pointer.weights]

        for a, b in zip(pointer_weights(5), pointer_weights(5), strict=True):
            self.assertAllEqual(a, b)
        self.assertNotAllClose(pointer_weights(5)[0], pointer_weights(6)[0])
        from psmm_tf.layers import PointerSoftmax

        with self.assertRaisesRegex(ValueError, "has no sentinel: gate_calibration"):
            PointerSoftmax(4, gate_calibration=(1.0, 0.0))

    def test_validate_inputs_names_the_bad_input(self):
        model = _task(preprocessor=False)
        ids = np.ones((2, 3), "int32")
        cases = [
            (dict(token_ids=ids + 10), r"`token_ids` holds the id 11, outside the vocabulary"),
            (dict(token_ids=ids, target_ids=-ids), r"`target_ids` holds the id -1"),
            (dict(token_ids=ids.astype("float32")), r"`token_ids` must hold integer ids"),
            (dict(token_ids=ids[0]), r"`token_ids` must have rank 2"),
            (dict(token_ids=ids[:, :0]), r"`token_ids` is empty"),
            (dict(token_ids=ids, padding_mask=np.ones((2, 4), bool)),
             r"`padding_mask` must have shape \(2, 3\)"),
            (dict(token_ids=ids, padding_mask=np.full((2, 3), 2.0)),
             r"`padding_mask` must be bool or hold only 0 and 1, got dtype float64 holding "
             r"\[2.0\]"),
            (dict(token_ids=ids, padding_mask=np.full((2, 3), "1")),
             r"`padding_mask` must be bool or hold only 0 and 1, got dtype <U1"),
            (dict(token_ids=ids, state=model.zero_state(2)[:1]), r"tuple of 2 \(h, c\) pairs"),
            (dict(token_ids=ids, state=((np.full((2, 8), np.nan, "float32"),) * 2,) * 2),
             r"`state\[0\]\[0\]` holds NaN"),
            (dict(token_ids=ids, memory=dict(model.empty_memory(3))),
             r"`memory\['hidden'\]` must have shape \(2, 3, 8\)"),
            # Checked before the cast to int32, which would wrap them onto id 5.
            (dict(token_ids=ids.astype("int64") + 2**32 + 4),
             r"`token_ids` holds the id 4294967301, outside"),
            (dict(token_ids=ids, target_ids=ids.astype("int64") - 2**32 + 4),
             r"`target_ids` holds the id -4294967291, outside"),
        ]
        for kwargs, message in cases:
            with self.assertRaisesRegex(ValueError, message, msg=str(kwargs)[:80]):
                validate_inputs(model, **kwargs)
        # Padding may hold any id: only the positions that exist are checked.
        mask = np.array([[True, True, False]] * 2)
        bad_padding = ids.copy()
        bad_padding[:, 2] = 99
        checked = validate_inputs(model, bad_padding, target_ids=bad_padding,
                                  padding_mask=mask)
        self.assertEqual(checked["token_ids"].dtype, np.int32)
        with self.assertRaisesRegex(ValueError, "`target_ids` holds the id 99"):
            model.score_with_state(ids, bad_padding)

    def test_score_text_names_what_is_not_text(self):
        # None gave "'NoneType' object is not iterable", bytes "texts[0] must be a
        # str, got int".
        model = _task()
        for texts, message in ((None, r"`texts` must be a str or a list of str, got NoneType"),
                               (b"the cat", r"`texts` is bytes: expected a str"),
                               ([b"the cat"], r"`texts\[0\]` is bytes: expected a str"),
                               ([], r"`texts` is empty"), (["a", 3], r"`texts\[1\]` must be a "
                                                                 r"str, got int")):
            with self.subTest(texts=texts), self.assertRaisesRegex(ValueError, message):
                model.score_text(texts)

    @parameterized.parameters(PointerSentinelLM, LSTMLanguageModel)
    def test_long_rows_are_scored_in_pieces_with_one_pass_numbers(self, cls):
        from psmm_tf.models.language_model import SCORE_PIECE_LENGTH

        model = _task(cls, preprocessor=False)
        steps = 2 * SCORE_PIECE_LENGTH + 37
        ids = np.random.default_rng(2).integers(0, len(WORDS), (2, steps + 1)).astype("int32")
        mask = np.ones((2, steps), bool)
        mask[1, steps - 60:] = False  # the second text ends early: padding in two pieces
        scored = model.score_with_state(ids[:, :-1], ids[:, 1:], padding_mask=mask)
        # One eager pass over the whole rows (the model's own call, no pieces).
        whole = model._score(ids[:, :-1], ids[:, 1:], mask, model.zero_state(2),
                             model.empty_memory(2))
        for key in ("log_probs", "gate"):
            self.assertAllClose(keras.ops.convert_to_numpy(scored[key]),
                                keras.ops.convert_to_numpy(whole[key]), atol=1e-5, msg=key)
        for got, want in zip(keras.tree.flatten(scored["state"]),
                             keras.tree.flatten(whole["state"]), strict=True):
            self.assertAllClose(keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want),
                                atol=1e-5)
        self.assertEqual(scored["log_probs"].shape, (2, steps))

    def test_score_after_set_gate_calibration_uses_the_new_gate(self):
        # score() compiles once; the calibration is a Python attribute its trace bakes in.
        model = _task(preprocessor=False)
        ids = np.random.default_rng(1).integers(0, len(WORDS), (2, 7)).astype("int32")
        before = keras.ops.convert_to_numpy(model.score_with_state(ids[:, :-1], ids[:, 1:])["gate"])
        model.set_gate_calibration((1.0, 3.0))  # the gate's logit + 3
        after = keras.ops.convert_to_numpy(model.score_with_state(ids[:, :-1], ids[:, 1:])["gate"])
        logit = np.log(before) - np.log1p(-before)
        self.assertAllClose(after, 1 / (1 + np.exp(-(logit + 3.0))), atol=1e-5)
        model.set_gate_calibration(None)
        self.assertAllClose(
            keras.ops.convert_to_numpy(model.score_with_state(ids[:, :-1], ids[:, 1:])["gate"]),
            before,
            atol=1e-6)

    def test_mixed_bfloat16_state_chains_from_one_score_to_the_next(self):
        # score() returns the state and memory in the compute dtype; passed back in, they
        # continue the text as one call over all of it does.
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy("mixed_bfloat16")
        try:
            model = _task(preprocessor=False)
        finally:
            keras.config.set_dtype_policy(previous)
        ids = np.random.default_rng(0).integers(0, len(WORDS), (2, 12)).astype("int32")
        whole = model.score_with_state(ids[:, :-1], ids[:, 1:])
        first = model.score_with_state(ids[:, :6], ids[:, 1:7])
        self.assertEqual(keras.backend.standardize_dtype(first["state"][0][0].dtype), "bfloat16")
        second = model.score_with_state(ids[:, 6:-1], ids[:, 7:], state=first["state"],
                             memory=first["memory"])
        chained = np.concatenate([keras.ops.convert_to_numpy(first["log_probs"]),
                                  keras.ops.convert_to_numpy(second["log_probs"])], axis=1)
        self.assertAllClose(chained, keras.ops.convert_to_numpy(whole["log_probs"]),
                            atol=0.05)

    @parameterized.parameters(PointerSentinelLM, LSTMLanguageModel)
    def test_init_scale_draws_every_weight_uniformly_and_zeroes_the_biases(self, cls):
        scale = 0.05
        backbone = LSTMBackbone(len(WORDS), 6, 8, 2, seed=3, init_scale=scale, name="backbone")
        model = cls(backbone, window_size=4, seed=3)
        head = [model.vocab_head.kernel]
        weights = [backbone.embedding.embeddings] + head + [
            w for layer in backbone.lstm_layers
            for w in (layer.kernel, layer.recurrent_kernel)]
        for weight in weights:
            values = keras.ops.convert_to_numpy(weight)
            self.assertLessEqual(np.abs(values).max(), scale, weight.path)
            # Uniform in [-s, s]: a spread over the range, not a constant or a narrow draw.
            self.assertGreater(values.std(), 0.8 * scale / np.sqrt(3), weight.path)
        for bias in [layer.bias for layer in backbone.lstm_layers] + [model.vocab_head.bias]:
            self.assertAllEqual(keras.ops.convert_to_numpy(bias), np.zeros(bias.shape))
        # The head has a seed of its own: it is not a reshaped copy of the embedding.
        embedding = keras.ops.convert_to_numpy(backbone.embedding.embeddings).ravel()
        kernel = keras.ops.convert_to_numpy(model.vocab_head.kernel).ravel()
        count = min(embedding.size, kernel.size)
        self.assertLess(abs(np.corrcoef(embedding[:count], kernel[:count])[0, 1]), 0.5)
        restored = cls.from_config(model.get_config())
        self.assertEqual(restored.backbone.init_scale, scale)
        self.assertFalse(restored.backbone.lstm_layers[0].unit_forget_bias)
        # Keras' initialisers by default: the forget gate's bias starts at 1.
        default = _task(cls, preprocessor=False)
        bias = keras.ops.convert_to_numpy(default.backbone.lstm_layers[0].bias)
        self.assertAllEqual(bias[8:16], np.ones(8))
        with self.assertRaisesRegex(ValueError, "init_scale must be a finite number > 0"):
            LSTMBackbone(len(WORDS), 6, 8, 2, init_scale=0.0)

    def test_backbone_rejects_what_is_not_a_backbone(self):
        with self.assertRaisesRegex(TypeError, "backbone must be an LSTMBackbone"):
            PointerSentinelLM(keras.layers.Dense(3), window_size=4)


if __name__ == "__main__":
    import tensorflow as tf

    tf.test.main()
