"""Tests of the language models: exact windowing, streaming, save/load, parameter counts."""


import os

import keras
import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from keras import ops

from psmm_tf import configs, testing
from psmm_tf.losses import PointerSentinelLoss
from psmm_tf.models import (
    InputOutputGateLM,
    LSTMLanguageModel,
    PointerSentinelLM,
    PointerSoftmaxLM,
    build_model,
    expected_parameter_count,
)

VOCAB = 23


def tiny_model(cls, window_size=5, seed=7):
    return testing.language_model(cls, vocab_size=VOCAB, embedding_dim=6, hidden_dim=8,
        num_layers=2, window_size=window_size, input_dropout=0.2, hidden_dropout=0.2,
        output_dropout=0.2, zoneout=0.1, seed=seed)


BOTH = (("psmm", PointerSentinelLM), ("lstm", LSTMLanguageModel),
        ("pointer_softmax", PointerSoftmaxLM))


class LanguageModelTest(testing.TestCase, parameterized.TestCase):

    def _text(self, batch=2, length=17):
        return self.rng.integers(0, VOCAB, size=(batch, length + 1)).astype("int32")

    @parameterized.named_parameters(*BOTH)
    def test_scoring_in_pieces_equals_scoring_whole(self, cls):
        model = tiny_model(cls)
        text = self._text()
        inputs, targets = text[:, :-1], text[:, 1:]
        whole = model.score_with_state(inputs, targets)
        state, memory, pieces = None, None, []
        for start, end in ((0, 3), (3, 11), (11, 17)):
            out = model.score_with_state(inputs[:, start:end], targets[:, start:end], state=state,
                              memory=memory)
            state, memory = out["state"], out["memory"]
            pieces.append(out["log_probs"])
        self.assertAllClose(np.concatenate(pieces, axis=1), whole["log_probs"], atol=1e-5)

    def test_recomputed_window_equals_streamed_scores(self):
        # A window of C = L - 1 context positions + T predicted ones, started from the carried
        # state, gives each target the same probability as reading the text whole.
        window_size, start, num_predicted = 5, 6, 3
        context = window_size - 1
        model = tiny_model(PointerSentinelLM, window_size)
        text = self._text(length=14)
        inputs, targets = text[:, :-1], text[:, 1:]
        whole = model.score_with_state(inputs, targets)["log_probs"]
        prefix = model.score_with_state(inputs[:, :start - context], targets[:, :start - context])
        window = inputs[:, start - context:start + num_predicted]
        outputs = model(window, state=prefix["state"], context_length=context)
        log_probs = model.log_prob(outputs, targets[:, start:start + num_predicted])
        self.assertAllClose(log_probs, whole[:, start:start + num_predicted], atol=1e-5)
        # The returned state is where the next window, T tokens later, starts.
        shifted = model.score_with_state(inputs[:, :start - context + num_predicted],
                              targets[:, :start - context + num_predicted])
        for (h, c), (h_ref, c_ref) in zip(outputs["state"], shifted["state"]):
            self.assertAllClose(h, h_ref, atol=1e-5)
            self.assertAllClose(c, c_ref, atol=1e-5)

    def test_positions_before_the_start_are_ignored(self):
        model = tiny_model(PointerSentinelLM)
        text = self._text(batch=1, length=6)
        window = np.concatenate([np.full((1, 4), 3, "int32"), text[:, :-1]], axis=1)
        mask = np.concatenate([np.zeros((1, 4), bool), np.ones((1, 6), bool)], axis=1)
        outputs = model(window, token_mask=mask, context_length=4)
        self.assertAllEqual(ops.convert_to_numpy(outputs["attention"])[0, :, :4], np.zeros((6, 4)))
        self.assertAllClose(model.log_prob(outputs, text[:, 1:]),
                            model.score_with_state(text[:, :-1], text[:, 1:])["log_probs"],
                            atol=1e-5)

    @parameterized.named_parameters(*BOTH)
    def test_padded_batch_equals_one_by_one(self, cls):
        model = tiny_model(cls)
        long_text, short_text = self._text(1, 12), self._text(1, 7)
        inputs = np.zeros((2, 12), "int32")
        targets = np.zeros((2, 12), "int32")
        inputs[0], targets[0] = long_text[0, :-1], long_text[0, 1:]
        inputs[1, :7], targets[1, :7] = short_text[0, :-1], short_text[0, 1:]
        mask = np.arange(12)[None, :] < np.array([[12], [7]])
        batched = np.asarray(
            model.score_with_state(inputs, targets, padding_mask=mask)["log_probs"])
        alone = np.asarray(
            model.score_with_state(short_text[:, :-1], short_text[:, 1:])["log_probs"])
        self.assertAllClose(batched[1, :7], alone[0], atol=1e-5)
        self.assertAllEqual(batched[1, 7:], np.zeros(5))
        first = np.asarray(model.score_with_state(long_text[:, :-1], long_text[:, 1:])["log_probs"])
        self.assertAllClose(batched[0], first[0], atol=1e-5)

    @parameterized.named_parameters(*BOTH)
    def test_padded_rows_carry_their_own_memory_and_state(self, cls):
        # Scoring a row padded after its end, then continuing it, equals continuing the
        # unpadded row: the memory holds the row's own last keys, not padding.
        model = tiny_model(cls)
        text = self._text(batch=1, length=9)
        inputs, targets = text[:, :-1], text[:, 1:]
        alone = model.score_with_state(inputs[:, :3], targets[:, :3])
        padded = model.score_with_state(np.pad(inputs[:, :3], [[0, 0], [0, 2]]),
                             np.pad(targets[:, :3], [[0, 0], [0, 2]]),
                             padding_mask=np.array([[1, 1, 1, 0, 0]], bool))
        for name in ("hidden", "token_ids", "mask"):
            self.assertAllClose(padded["memory"][name], alone["memory"][name], atol=1e-6)
        rest = [model.score_with_state(inputs[:, 3:], targets[:, 3:], state=out["state"],
                            memory=out["memory"])["log_probs"] for out in (alone, padded)]
        self.assertAllClose(rest[0], rest[1], atol=1e-6)
        # A row with nothing in the window keeps its memory.
        empty = model.score_with_state(inputs[:, 3:5], targets[:, 3:5], state=alone["state"],
                            memory=alone["memory"], padding_mask=np.zeros((1, 2), bool))
        self.assertAllClose(empty["memory"]["hidden"], alone["memory"]["hidden"])

    def test_distribution_rows_sum_to_one_and_match_log_prob(self):
        model = tiny_model(PointerSentinelLM)
        text = self._text()
        outputs = model(text[:, :-1], memory=model.empty_memory(2))
        dist = ops.convert_to_numpy(model.distribution(outputs))
        self.assertAllClose(dist.sum(-1), np.ones(dist.shape[:2]), atol=1e-5)
        log_probs = ops.convert_to_numpy(model.log_prob(outputs, text[:, 1:]))
        picked = np.take_along_axis(dist, text[:, 1:, None], axis=-1)[..., 0]
        self.assertAllClose(np.exp(log_probs), picked, atol=1e-6)

    @parameterized.named_parameters(("psmm", PointerSentinelLM),
                                    ("pointer_softmax", PointerSoftmaxLM))
    def test_output_dropout_reaches_the_softmax_only(self, cls):
        # Only output dropout on: in training the head must see the evaluation's states (so its
        # attention and gate are the evaluation's), while the softmax's input is dropped out.
        model = testing.language_model(cls, vocab_size=VOCAB, embedding_dim=6, hidden_dim=8,
            num_layers=2, window_size=5, input_dropout=0.0, hidden_dropout=0.0,
            output_dropout=0.5, zoneout=0.0, seed=7)
        inputs = self._text()[:, :-1]
        memory = model.empty_memory(2)
        evaluation = model(inputs, memory=memory, training=False)
        training = model(inputs, memory=memory, training=True)
        gate_name = "gate" if "gate" in evaluation else "switch"
        for name in ("attention", gate_name, "hidden"):
            self.assertAllClose(training[name], evaluation[name], atol=1e-6, msg=name)
        self.assertAllClose(training["memory"]["hidden"], evaluation["memory"]["hidden"],
                            atol=1e-6)
        # Locked dropout at rate 0.5 zeroes about half of the softmax's input units: the
        # logits must change, and be those of the masked, rescaled states.
        logits_gap = np.abs(training["vocab_logits"] - evaluation["vocab_logits"]).max()
        self.assertGreater(logits_gap, 1e-3)
        kernel, bias = (ops.convert_to_numpy(w) for w in model.vocab_head.weights)
        hidden = ops.convert_to_numpy(evaluation["hidden"])
        dropped = (ops.convert_to_numpy(training["vocab_logits"]) - bias) @ np.linalg.pinv(kernel)
        kept = np.isclose(dropped, 2.0 * hidden, atol=1e-4) | np.isclose(dropped, 0.0,
                                                                         atol=1e-4)
        self.assertTrue(kept.all())

    @testing.skip_unless_tensorflow()  # tf.GradientTape / tf.function
    def test_no_gradient_flows_into_the_carried_memory(self):
        model = tiny_model(PointerSentinelLM)
        text = self._text()
        memory = model.empty_memory(2)
        memory = dict(memory, hidden=tf.Variable(tf.random.normal(memory["hidden"].shape)),
                      mask=tf.ones_like(memory["mask"]))
        with tf.GradientTape() as tape:
            outputs = model(text[:, :-1], memory=memory, training=True)
            loss = PointerSentinelLoss()(text[:, 1:], outputs)
        grads = tape.gradient(loss, [memory["hidden"]] + model.trainable_weights)
        self.assertIsNone(grads[0])
        names = [w.path for w in model.trainable_weights]
        for name, grad in zip(names, grads[1:]):
            self.assertIsNotNone(grad, name)
            self.assertGreater(float(tf.reduce_sum(tf.abs(tf.convert_to_tensor(grad)))), 0.0,
                               name)
        self.assertTrue(any("pointer/sentinel" in name for name in names))

    @testing.skip_unless_tensorflow()
    def test_xla_train_step_matches_eager(self):
        # The training path (training=True, targets given, C context positions) with every
        # dropout and zoneout rate at 0: TensorFlow draws other random numbers under XLA than
        # eagerly, so masks could not be compared.
        model = testing.language_model(
            PointerSentinelLM, vocab_size=VOCAB, embedding_dim=6, hidden_dim=8, num_layers=2,
            window_size=5, input_dropout=0.0, hidden_dropout=0.0, output_dropout=0.0,
            zoneout=0.0, seed=7)
        text = self._text()
        loss_fn = PointerSentinelLoss()

        def loss_and_grads(inputs, targets):
            with tf.GradientTape() as tape:
                outputs = model(inputs, context_length=4, targets=targets, training=True)
                loss = loss_fn(targets, outputs)
            return loss, tape.gradient(loss, model.trainable_weights)

        eager = loss_and_grads(text[:, :-1], text[:, 5:])
        compiled = tf.function(loss_and_grads, jit_compile=True)(text[:, :-1], text[:, 5:])
        self.assertAllClose(eager[0], compiled[0], atol=1e-5)
        for a, b in zip(eager[1], compiled[1]):
            # The embedding's gradient may be IndexedSlices on one path and dense on the other.
            self.assertAllClose(tf.convert_to_tensor(a), tf.convert_to_tensor(b), atol=1e-5)

    def test_keras_files_load_here_and_in_a_fresh_process_on_the_other_backend(self):
        # Every file is read back with safe_mode on twice: in this process, on the backend that
        # wrote it, and in a fresh one on the other backend that imports only psmm_tf (the
        # classes register themselves on import); CI runs it on both, so each backend reads
        # the other's files in a fresh process. Among the files: every kind's, an
        # input-to-output gate's (its base a PointerSentinelLM), a CNN softmax's (its spelling
        # table kept).
        models = {name: tiny_model(cls) for name, cls in BOTH}
        models["input_output_gate"] = InputOutputGateLM(tiny_model(PointerSentinelLM),
                                                        embedding_dim=4, seed=1)
        models["cnn_softmax"] = testing.language_model(
            PointerSentinelLM, vocab_size=VOCAB, embedding_dim=6, hidden_dim=8, num_layers=1,
            window_size=4, seed=5, softmax="cnn", max_word_length=6)
        models["cnn_softmax"].set_vocabulary(["<unk>", "<eos>"] + [f"w{i}" for i in range(21)])
        text = self._text()
        classes = {name: type(model).__name__ for name, model in models.items()}
        other = "jax" if keras.backend.backend() == "tensorflow" else "tensorflow"
        directory = self.get_temp_dir()
        fresh = testing.scores_after_keras_round_trip(
            models, text, directory, backend=other, check=f"""
                assert type(model).__name__ == {classes!r}[name], name
                if name == "input_output_gate":
                    assert type(model.base_model).__name__ == "PointerSentinelLM"
                if name == "cnn_softmax":
                    assert model.vocab_head.characters.numpy()[2, 1] == 3 + ord("w")
                """)
        self.assertEqual(sorted(fresh), sorted(models))
        for name, model in models.items():
            expected = ops.convert_to_numpy(
                model.score_with_state(text[:, :-1], text[:, 1:])["log_probs"])
            # The file scores_after_keras_round_trip wrote (`<name>.keras`), read here.
            loaded = keras.saving.load_model(os.path.join(directory, f"{name}.keras"))
            self.assertIs(type(loaded), type(model))
            if name == "input_output_gate":
                self.assertIs(type(loaded.base_model), PointerSentinelLM)
            if name == "cnn_softmax":
                self.assertAllEqual(ops.convert_to_numpy(loaded.vocab_head.characters),
                                    ops.convert_to_numpy(model.vocab_head.characters))
            here = loaded.score_with_state(text[:, :-1], text[:, 1:])["log_probs"]
            self.assertAllClose(ops.convert_to_numpy(here), expected, atol=1e-6, msg=name)
            self.assertAllClose(fresh[name], expected, atol=1e-5, msg=f"{name} on {other}")

    def test_initial_gate_reaches_the_pointer_and_survives_get_config(self):
        model = build_model(configs.ModelConfig(vocab_size=VOCAB, embedding_dim=6, hidden_dim=8,
                                                window_size=5, seed=1,
                                                hyperparameters={"initial_gate": 0.9}))
        self.assertEqual(model.pointer.initial_gate, 0.9)
        clone = PointerSentinelLM.from_config(model.get_config())
        self.assertEqual(clone.pointer.initial_gate, 0.9)
        self.assertAllClose(ops.convert_to_numpy(clone.pointer.query_bias), np.full(8, 0.5))
        # The pointer softmax has no sentinel: psmm's hyperparameter does not reach it.
        other = build_model(configs.ModelConfig(kind="pointer_softmax", vocab_size=VOCAB,
                                                embedding_dim=6, hidden_dim=8,
                                                hyperparameters={"initial_gate": 0.9}))
        self.assertNotIn("initial_gate", other.get_config())

    def test_medium_parameter_count_is_the_papers_arithmetic(self):
        # Embedding 10000 x 650, two LSTM layers 4 x 650 x (650 + 650 + 1), softmax 650 x 10000
        # + 10000: 19,775,200 weights (the paper's "20M"); the pointer adds 650^2 + 2 x 650.
        medium = configs.get_preset("medium").model
        # The pointer softmax swaps the sentinel (650) for a 64-unit switch MLP (41,729).
        for kind, expected in (("lstm", 19_775_200), ("psmm", 19_775_200 + 423_800),
                               ("pointer_softmax", 19_775_200 + 423_800 - 650 + 41_729)):
            model_config = configs.dataclasses.replace(medium, kind=kind, vocab_size=10_000)
            self.assertEqual(expected_parameter_count(model_config), expected)
            self.assertEqual(build_model(model_config).count_params(), expected)
            keras.backend.clear_session()

    def test_rejects_bad_input(self):
        model = tiny_model(PointerSentinelLM)
        text = self._text()
        # Eager calls check concrete ids; compiled ones rely on validate_inputs at the edge.
        with self.assertRaisesRegex(ValueError,
                                    "`token_ids` holds an id >= the vocabulary size"):
            model(text + VOCAB)
        with self.assertRaisesRegex(ValueError, "`token_ids` holds a negative id"):
            model(text - VOCAB)
        with self.assertRaisesRegex(ValueError, "must be longer than context_length"):
            model(text[:, :4], context_length=4)
        with self.assertRaisesRegex(ValueError, "one \\(h, c\\) pair per layer \\(2\\)"):
            model(text, state=model.zero_state(2)[:1])
        with self.assertRaisesRegex(ValueError, "window_size must be an integer >= 1"):
            tiny_model(PointerSentinelLM, window_size=0)


if __name__ == "__main__":
    tf.test.main()
