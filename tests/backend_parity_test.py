"""The TensorFlow-trained model on the JAX backend: same scores, same training step.

The JAX side runs in one fresh interpreter with KERAS_BACKEND=jax (a process has one Keras
backend), reading what this TensorFlow process wrote: both checks share it, as one JAX start-up.
"""

import os
import textwrap

import keras
import numpy as np
import tensorflow as tf

from psmm_tf import configs, testing
from psmm_tf.models import build_model
from psmm_tf.training.steps import TrainStep

JAX = {"KERAS_BACKEND": "jax"}


class BackendParityTest(testing.TestCase):

    def test_jax_scores_a_trained_run_and_takes_the_training_step_as_tensorflow_does(self):
        scoring, check_scores = self._a_trained_run_scores_the_same_text_under_jax()
        stepping = self._jax_training_step_matches_the_tensorflow_step()
        testing.run_in_fresh_process(
            "import numpy as np, keras\nimport psmm_tf\n"
            "assert keras.backend.backend() == 'jax'\n" + scoring + stepping, env=JAX)
        check_scores()

    def _a_trained_run_scores_the_same_text_under_jax(self):
        """The JAX child's code that scores a text of the tests' tiny run, and the check of
        its scores against this process's."""
        workdir = str(testing.trained_tiny_run())  # the tests' shared tiny run, read only
        text = "the cat sat on the mat\nthe cat and the dog\n"
        model = keras.saving.load_model(os.path.join(workdir, "model.keras"))
        expected = model.score_text([text])
        out = os.path.join(self.get_temp_dir(), "jax_scores.npz")
        code = textwrap.dedent(f"""
            model = keras.saving.load_model({os.path.join(workdir, "model.keras")!r})
            result = model.score_text([{text!r}])
            np.savez({out!r}, log_probs=result["log_probs"], gate=result["gate"])
        """)

        def check_scores():
            jax_scores = np.load(out)
            self.assertGreater(expected["num_tokens"][0], 10)
            self.assertAllClose(jax_scores["log_probs"], expected["log_probs"], atol=1e-4)
            self.assertAllClose(jax_scores["gate"], expected["gate"], atol=1e-4)
        return code, check_scores

    def _jax_training_step_matches_the_tensorflow_step(self):
        """The JAX child's code that takes the TensorFlow step's batch and asserts the same
        loss, gradients and updated weights, mid pointer warm-up (`pointer_share`)."""
        # No dropout or zoneout: the two backends draw different random masks from one seed.
        model_config = configs.ModelConfig(
            kind="psmm", vocab_size=19, embedding_dim=6, hidden_dim=8, num_layers=2,
            window_size=4, input_dropout=0.0, hidden_dropout=0.0, output_dropout=0.0,
            zoneout=0.0, seed=5)
        model = build_model(model_config)
        rng = np.random.default_rng(0)
        batch_size, steps = 3, 6
        batch = {"token_ids": rng.integers(0, 19, (batch_size, steps)).astype("int32"),
                 "token_mask": np.ones((batch_size, steps), bool),
                 "targets": rng.integers(0, 19, (batch_size, steps)).astype("int32"),
                 "target_weights": np.ones((batch_size, steps), "float32")}
        batch["target_weights"][0, -2:] = 0.0
        directory = self.get_temp_dir()
        model.save(os.path.join(directory, "model.keras"))
        np.savez(os.path.join(directory, "batch.npz"), **batch)
        settings = dict(context_length=0, use_memory=True, clip_norm=0.5,
                        pointer_clip_norm=0.05, pointer_weight=0.5)
        optimizer = keras.optimizers.SGD(1.0)
        optimizer.build(model.trainable_variables)
        step = TrainStep(model, optimizer, tf.distribute.get_strategy(), batch_size, **settings)
        state, memory = step.initial_carry()
        tensors = {k: tf.constant(v) for k, v in batch.items()}
        # Mid pointer warm-up: the pointer's share of the objective is 0.3, not 1.
        share, normalizer = tf.constant(0.3), tf.constant(float(batch_size))
        grads, sums, _, _ = step._forward_backward(tensors, state, memory, normalizer, share)
        _, whole_pointer, _, _ = step._forward_backward(tensors, state, memory, normalizer,
                                                        tf.constant(1.0))
        self.assertGreater(abs(float(sums["loss"]) - float(whole_pointer["loss"])), 1e-3)
        metrics, _, _ = step(tensors, state, memory, pointer_share=0.3)
        self.assertGreater(float(metrics["grad_norm"]), 0.5)  # the clipping acts
        np.savez(os.path.join(directory, "tf.npz"),
                 loss=float(sums["loss"]) / batch_size,
                 # (The embedding's gradient is its rows, tf.IndexedSlices: made dense.)
                 **{f"grad_{i}": tf.convert_to_tensor(g).numpy() for i, g in enumerate(grads)},
                 **{f"after_{i}": v.numpy() for i, v in enumerate(model.trainable_variables)})
        return textwrap.dedent(f"""
            from psmm_tf.jax_train_step import JaxTrainStep
            model = keras.saving.load_model({directory + "/model.keras"!r})
            batch = dict(np.load({directory + "/batch.npz"!r}))
            expected = np.load({directory + "/tf.npz"!r})
            step = JaxTrainStep(model, keras.optimizers.SGD(1.0), {batch_size}, **{settings!r})
            loss, grads = step.loss_and_gradients(batch, pointer_share=0.3)
            np.testing.assert_allclose(float(loss), expected["loss"], atol=1e-4, rtol=1e-5)
            for i, grad in enumerate(grads):
                np.testing.assert_allclose(np.asarray(grad), expected[f"grad_{{i}}"], atol=1e-4,
                                           err_msg=model.trainable_variables[i].path)
            step(batch, pointer_share=0.3)
            for i, variable in enumerate(model.trainable_variables):
                np.testing.assert_allclose(np.asarray(variable.value), expected[f"after_{{i}}"],
                                           atol=1e-4, err_msg=variable.path)
            print("matched", len(grads))
        """)


if __name__ == "__main__":
    tf.test.main()
