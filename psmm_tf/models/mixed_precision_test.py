"""Mixed precision (`build_model(..., dtype=)`, psmm-train's `--mixed_precision`), on the
current Keras backend: the policy of every layer through a `.keras` round trip, the mixture in
float32, the carried state in the compute dtype, and a training step with its loss scaling."""

import dataclasses
import os

import keras
import numpy as np
from absl.testing import parameterized

from psmm_tf import testing
from psmm_tf.configs import ModelConfig
from psmm_tf.models import build_model

V, B, T = 13, 2, 9
POLICIES = (("bfloat16", "bfloat16", "mixed_bfloat16"), ("float16", "float16", "mixed_float16"))
CONFIG = ModelConfig(vocab_size=V, embedding_dim=8, hidden_dim=8, num_layers=2, window_size=4,
                     input_dropout=0.0, hidden_dropout=0.0, output_dropout=0.0, zoneout=0.0,
                     seed=5)


def _ids(seed=0, shape=(B, T + 1)):
    return np.random.default_rng(seed).integers(0, V, shape).astype("int32")


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(x, "float32")), np.float64)


class MixedPrecisionTest(testing.TestCase, parameterized.TestCase):

    @parameterized.product(kind=("psmm", "lstm", "pointer_softmax"),
                           policy=("mixed_bfloat16", "mixed_float16"))
    def test_every_layer_keeps_the_models_policy_through_a_keras_file(self, kind, policy):
        model = build_model(dataclasses.replace(CONFIG, kind=kind), dtype=policy)
        path = os.path.join(self.get_temp_dir(), f"{kind}_{policy}.keras")
        model.save(path)
        # Loaded under the float32 global policy: the layers the backbone and the task create
        # in their constructors must take the saved policy, not the global one.
        self.assertEqual(keras.config.dtype_policy().name, "float32")
        loaded = keras.saving.load_model(path)
        for m in (model, loaded):
            policies = {layer.name: layer.dtype_policy.name for layer in m._flatten_layers()}
            self.assertEqual({n: p for n, p in policies.items() if p != policy}, {})
            self.assertEqual({v.dtype for v in m.weights if "seed" not in v.path}, {"float32"})
        ids = _ids()
        self.assertAllClose(_numpy(loaded.score_with_state(ids[:, :-1], ids[:, 1:])["log_probs"]),
                            _numpy(model.score_with_state(ids[:, :-1], ids[:, 1:])["log_probs"]),
                            atol=0)

    @parameterized.named_parameters(*POLICIES)
    def test_the_mixture_is_taken_in_float32_from_16_bit_heads(self, compute_dtype, policy):
        model = build_model(CONFIG, dtype=policy)
        ids = _ids()
        outputs = model(ids[:, :-1])
        self.assertEqual(keras.backend.standardize_dtype(outputs["vocab_logits"].dtype),
                         compute_dtype)
        self.assertEqual(keras.backend.standardize_dtype(outputs["gate"].dtype), "float32")
        log_prob = model.log_prob(outputs, ids[:, 1:])
        distribution = model.distribution(outputs)
        for value in (log_prob, distribution):
            self.assertEqual(keras.backend.standardize_dtype(value.dtype), "float32")
        # Eq. 3 in float64 from the same 16-bit logits: only float32 rounding may differ.
        args = [_numpy(outputs[k]) for k in ("vocab_logits", "attention", "gate")]
        key_ids = keras.ops.convert_to_numpy(outputs["key_ids"])
        self.assertAllClose(
            _numpy(log_prob),
            testing.reference_mixture_log_prob(*args, key_ids, ids[:, 1:]), atol=1e-5)
        self.assertAllClose(_numpy(distribution),
                            testing.reference_mixture_distribution(*args, key_ids), atol=1e-6)

    @parameterized.named_parameters(*POLICIES)
    def test_streamed_state_and_memory_keep_the_compute_dtype(self, compute_dtype, policy):
        model = build_model(CONFIG, dtype=policy)
        ids = _ids(1, (B, 13))
        whole = model.score_with_state(ids[:, :-1], ids[:, 1:])
        first = model.score_with_state(ids[:, :5], ids[:, 1:6])
        for value in (first["state"][0][0], first["state"][1][1], first["memory"]["hidden"]):
            self.assertEqual(keras.backend.standardize_dtype(value.dtype), compute_dtype)
        second = model.score_with_state(ids[:, 5:-1], ids[:, 6:], state=first["state"],
                             memory=first["memory"])
        chained = np.concatenate([_numpy(first["log_probs"]), _numpy(second["log_probs"])], 1)
        # The same 16-bit numbers in both ways; only the order of float32 sums may differ.
        self.assertAllClose(chained, _numpy(whole["log_probs"]), atol=1e-3)

    @parameterized.named_parameters(*POLICIES)
    def test_a_training_step_moves_the_float32_weights_as_float32_training_does(
            self, compute_dtype, policy):
        reference = build_model(CONFIG)
        model = build_model(CONFIG, dtype=policy)
        model.set_weights(reference.get_weights())
        optimizer = keras.optimizers.SGD(0.5)
        if policy == "mixed_float16":  # a scale of 16: the gradients fit in float16
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=16.0)
        batch = _batch()
        before = [np.array(w) for w in model.get_weights()]
        metrics, state = _train_step(model, optimizer, batch)
        expected_metrics, _ = _train_step(reference, keras.optimizers.SGD(0.5), batch)
        self.assertEqual(keras.backend.standardize_dtype(state[0][0].dtype), compute_dtype)
        # The gradient norm is the true one (the loss scale divided out), within 16-bit error.
        self.assertAllClose(float(metrics["grad_norm"]), float(expected_metrics["grad_norm"]),
                            rtol=0.05)
        moved = [w - b for w, b in zip(model.get_weights(), before, strict=True)]
        expected = [w - b for w, b in zip(reference.get_weights(), before, strict=True)]
        for got, want in zip(moved, expected, strict=True):
            self.assertEqual(got.dtype, np.float32)
            self.assertAllClose(got, want, atol=0.03 * np.abs(want).max() + 1e-7)
        self.assertGreater(max(np.abs(m).max() for m in moved), 1e-4)


    def test_a_float16_step_that_overflows_is_skipped_and_the_loss_scale_halved(self):
        # Keras' first scale, 2**15, overflows float16 here (the true gradient norm is ~9): the
        # clipped gradients must stay non-finite so that the optimizer skips the update.
        model = build_model(CONFIG, dtype="mixed_float16")
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.5),
                                                        initial_scale=2.0**15)
        before = [np.array(w) for w in model.get_weights()]
        _train_step(model, optimizer, _batch())
        self.assertEqual(float(keras.ops.convert_to_numpy(optimizer.dynamic_scale)), 2.0**14)
        for got, want in zip(model.get_weights(), before, strict=True):
            self.assertAllEqual(got, want)


def _batch():
    ids = _ids(2)
    return {"token_ids": ids[:, :-1], "token_mask": np.ones((B, T), bool),
            "targets": ids[:, 1:], "target_weights": np.ones((B, T), np.float32)}


def _train_step(model, optimizer, batch):
    """psmm-train's training step of this backend: `(metrics, state)` after one update."""
    if keras.backend.backend() == "jax":
        from psmm_tf.jax_train_step import JaxTrainStep

        step = JaxTrainStep(model, optimizer, B, context_length=0, use_memory=True)
        metrics, state, _ = step(batch)
        return metrics, state
    import tensorflow as tf

    from psmm_tf.training.steps import TrainStep

    step = TrainStep(model, optimizer, tf.distribute.get_strategy(), B, context_length=0,
                     use_memory=True)
    state, memory = step.initial_carry()
    metrics, state, _ = step({k: tf.constant(v) for k, v in batch.items()}, state, memory)
    return metrics, state
