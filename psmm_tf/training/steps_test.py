"""The training step's objective: eq. 9 summed over a window's targets, averaged over streams."""

import keras
import numpy as np
import tensorflow as tf

from psmm_tf.configs import ModelConfig
from psmm_tf.gradients import clip_gradients
from psmm_tf.models import build_model
from psmm_tf.training.steps import TrainStep

B, T, V = 3, 5, 17


def _model(kind, **fields):
    config = ModelConfig(kind=kind, vocab_size=V, embedding_dim=6, hidden_dim=6, num_layers=1,
                         window_size=4, input_dropout=0.0, hidden_dropout=0.0,
                         output_dropout=0.0, zoneout=0.0, seed=3, **fields)
    model = build_model(config)
    if fields.get("input_embedding") == "chars":
        model.backbone.embedding.set_vocabulary([f"w{i}" * (i % 3 + 1) for i in range(V)])
    model(tf.zeros([B, T], tf.int32))
    return model


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    weights = np.ones([B, T], np.float32)
    weights[2, 3:] = 0.0  # a stream that ended inside the window
    return {"token_ids": tf.constant(rng.integers(0, V, [B, T]), tf.int32),
            "token_mask": tf.constant(weights > 0),
            "targets": tf.constant(rng.integers(0, V, [B, T]), tf.int32),
            "target_weights": tf.constant(weights)}


def _expected_gradients(model, batch):
    """-d/dw of sum_{b,t} w_bt log p(y_bt) / B, from the logits (no package loss code)."""
    with tf.GradientTape() as tape:
        outputs = model(batch["token_ids"], token_mask=batch["token_mask"], training=True)
        nll = tf.nn.sparse_softmax_cross_entropy_with_logits(batch["targets"],
                                                             outputs["vocab_logits"])
        loss = tf.reduce_sum(nll * batch["target_weights"]) / B
    grads = tape.gradient(loss, model.trainable_variables)
    return [tf.convert_to_tensor(g).numpy() for g in grads], float(loss)


def _expected_psmm_gradients(model, batch, pointer_weight):
    """-d/dw of eq. 9 summed over targets / B, from the NumPy-free mixture written out here."""
    with tf.GradientTape() as tape:
        outputs = model(batch["token_ids"], token_mask=batch["token_mask"], training=True)
        p_vocab = tf.gather(tf.nn.softmax(outputs["vocab_logits"]), batch["targets"],
                            batch_dims=2)
        matches = tf.cast(tf.equal(outputs["key_ids"][:, None, :],
                                   batch["targets"][:, :, None]), tf.float32)
        p_pointer = tf.reduce_sum(outputs["attention"] * matches, axis=-1)
        gate = outputs["gate"]
        per_target = (-tf.math.log(gate * p_vocab + p_pointer)
                      - pointer_weight * tf.math.log(gate + p_pointer))
        loss = tf.reduce_sum(per_target * batch["target_weights"]) / B
    grads = tape.gradient(loss, model.trainable_variables)
    return [tf.convert_to_tensor(g).numpy() for g in grads]


class TrainStepTest(tf.test.TestCase):
    def test_defaults_are_the_train_configs(self):
        from psmm_tf.configs import TrainConfig

        model = _model("psmm")
        step = TrainStep(model, keras.optimizers.SGD(1.0), tf.distribute.get_strategy(), 2, 0,
                         use_memory=False)
        config = TrainConfig()
        self.assertEqual((step.clip_norm, step.pointer_clip_norm, step.pointer_weight),
                         (config.clip_norm, config.pointer_clip_norm, config.pointer_loss_weight))

    def _one_step(self, clip_norm, kind="lstm", model_fields=None, **step_args):
        step_args = {"pointer_clip_norm": None, "pointer_weight": 1.0, **step_args}
        model = _model(kind, **(model_fields or {}))
        batch = _batch()
        if kind == "lstm":
            expected, loss = _expected_gradients(model, batch)
        else:
            expected = _expected_psmm_gradients(model, batch,
                                                step_args.get("pointer_weight", 1.0))
            loss = None
        before = [v.numpy() for v in model.trainable_variables]
        optimizer = keras.optimizers.SGD(learning_rate=1.0)
        optimizer.build(model.trainable_variables)
        step = TrainStep(model, optimizer, tf.distribute.get_strategy(), B, 0,
                         use_memory=False, clip_norm=clip_norm, **step_args)
        metrics, _, _ = step(batch, *step.initial_carry())
        after = [v.numpy() for v in model.trainable_variables]
        return expected, loss, before, after, metrics

    def test_sgd_step_follows_the_sum_over_time_mean_over_streams(self):
        expected, loss, before, after, metrics = self._one_step(clip_norm=1e9)
        for g, w0, w1 in zip(expected, before, after, strict=True):
            self.assertAllClose(w0 - w1, g, atol=1e-6)
        # The reported sums are over the batch's 13 real targets.
        self.assertEqual(float(metrics["weight"]), 13.0)
        self.assertAllClose(float(metrics["loss"]) / B, loss, rtol=1e-5)

    def test_update_is_clipped_to_the_global_norm(self):
        expected, _, before, after, metrics = self._one_step(clip_norm=0.01)
        norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in expected))
        self.assertGreater(norm, 0.01)
        self.assertAllClose(float(metrics["grad_norm"]), norm, rtol=1e-4)
        for g, w0, w1 in zip(expected, before, after, strict=True):
            self.assertAllClose(w0 - w1, g * 0.01 / norm, atol=1e-7)

    def _pointer_indices(self, kind="psmm"):
        model = _model(kind)
        names = [v.path for v in model.trainable_variables]
        return [i for i, name in enumerate(names) if name.startswith("pointer")
                or "/pointer/" in name]

    def test_pointer_loss_weight_scales_the_pointer_term(self):
        for weight in (0.0, 0.5):
            expected, _, before, after, _ = self._one_step(1e9, kind="psmm",
                                                           pointer_weight=weight)
            for g, w0, w1 in zip(expected, before, after, strict=True):
                self.assertAllClose(w0 - w1, g, atol=2e-6)

    def _assert_groups_clipped(self, expected, before, after, metrics, limits):
        """Each group of `limits` (indices -> limit) moved by its gradient times
        limit / its own norm, the rest by clip_norm's; all norms exceed their limits."""

        def norm(indices):
            return np.sqrt(sum(np.sum(expected[i].astype(np.float64) ** 2) for i in indices))

        self.assertAllClose(float(metrics["grad_norm"]), norm(range(len(expected))), rtol=1e-4)
        for indices, limit in limits:
            self.assertGreater(norm(indices), limit)
            for i in indices:
                self.assertAllClose(before[i] - after[i],
                                    expected[i] * limit / norm(indices), atol=1e-7)

    def test_pointer_variables_are_clipped_by_their_own_norm(self):
        expected, _, before, after, metrics = self._one_step(0.02, kind="psmm",
                                                             pointer_clip_norm=0.003)
        pointer = self._pointer_indices()
        self.assertLen(pointer, 3)  # W, b and the sentinel s
        rest = [i for i in range(len(expected)) if i not in pointer]
        self._assert_groups_clipped(expected, before, after, metrics,
                                    ((pointer, 0.003), (rest, 0.02)))

    def test_char_cnn_variables_are_clipped_by_their_own_norm(self):
        expected, _, before, after, metrics = self._one_step(
            0.02, model_fields={"input_embedding": "chars"}, char_cnn_clip_norm=0.003)
        model = _model("lstm", input_embedding="chars")
        names = [v.path for v in model.trainable_variables]
        # (the backbone builds itself when constructed: its paths start at "backbone/")
        cnn = [i for i, name in enumerate(names)
               if name.split("/")[:2] == ["backbone", "embedding"]]
        # The character embedding, 5 convolutions and the highway's two layers (kernel and
        # bias each), the projection's kernel.
        self.assertLen(cnn, 1 + 10 + 4 + 1)
        rest = [i for i in range(len(expected)) if i not in cnn]
        self._assert_groups_clipped(expected, before, after, metrics,
                                    ((cnn, 0.003), (rest, 0.02)))

    def test_char_cnn_clip_norm_leaves_models_reading_ids_alone(self):
        unset = self._one_step(0.02, char_cnn_clip_norm=None)
        grouped = self._one_step(0.02, char_cnn_clip_norm=0.003)
        for a, b in zip(unset[3], grouped[3], strict=True):
            self.assertAllEqual(a, b)


class ClipGradientsTest(tf.test.TestCase):

    def test_sparse_rows_are_clipped_as_tf_clips_them_and_stay_sparse(self):
        # An embedding's gradient, row 1 looked up twice: an optimizer given the slices
        # updates only their rows (the character-output layer's Adam relies on it).
        rows = tf.IndexedSlices(tf.constant([[3.0, 0.0], [0.0, 4.0], [1.0, 2.0]]),
                                tf.constant([1, 1, 3]), tf.constant([5, 2]))
        dense = tf.constant([[6.0, 8.0]])
        for limit in (2.0, 100.0):
            clipped, norm = clip_gradients([rows, dense], limit)
            expected, expected_norm = tf.clip_by_global_norm([rows, dense], limit)
            self.assertIsInstance(clipped[0], tf.IndexedSlices)
            self.assertAllEqual(clipped[0].indices, rows.indices)
            self.assertAllClose(clipped[0].values, expected[0].values)
            self.assertAllClose(clipped[1], expected[1])
            self.assertAllClose(norm, expected_norm)
            self.assertAllClose(norm, np.sqrt(9 + 16 + 1 + 4 + 36 + 64))


if __name__ == "__main__":
    tf.test.main()
