"""A SavedModel of a 16-bit model: its signatures keep their float32 state dtypes, the state
streams back in unchanged, and the scores are the Keras model's."""

import os
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from psmm_tf import testing as psmm_testing
from psmm_tf.configs import get_preset
from psmm_tf.data import Vocabulary
from psmm_tf.export import STATE_NAMES, testing
from psmm_tf.export.export_lib import export
from psmm_tf.models import build_model


class MixedPrecisionExportTest(psmm_testing.TestCase, parameterized.TestCase):

    @parameterized.parameters("mixed_bfloat16", "mixed_float16")
    def test_streamed_state_round_trips_and_scores_equal_keras(self, policy):
        folder = tempfile.mkdtemp(dir=self.get_temp_dir())
        vocabulary_file = testing.write_vocabulary(os.path.join(folder, "vocab.txt"))
        vocabulary = Vocabulary.load(vocabulary_file)
        config = get_preset("tiny").replace(model={"vocab_size": len(vocabulary), "seed": 3})
        model = build_model(config.model, dtype=policy)
        signatures = tf.saved_model.load(
            export(model, vocabulary_file, os.path.join(folder, "base"))).signatures
        for name, signature in signatures.items():
            inputs = signature.structured_input_signature[1]
            for key, spec in signature.structured_outputs.items():
                if key in inputs:  # a state output is passed back as the same input
                    self.assertEqual(spec.dtype, inputs[key].dtype, f"{name}: {key}")
        ids = self.rng.integers(0, len(vocabulary), (2, 21)).astype(np.int32)
        state = {k: v for k, v in signatures["initial_state"](stream_ids=tf.range(2)).items()}
        pieces = []
        for start, stop in ((0, 8), (8, 21)):
            out = signatures["score_stream"](token_ids=tf.constant(ids[:, start:stop]),
                                             lengths=tf.constant([stop - start] * 2), **state)
            state = {name: out[name] for name in STATE_NAMES}
            pieces.append(out["log_probs"].numpy())
        inputs = np.concatenate([np.full((2, 1), vocabulary.eos_id, np.int32), ids[:, :-1]], 1)
        keras_scores = model.score_with_state(inputs, ids)["log_probs"]
        self.assertAllClose(np.concatenate(pieces, 1), np.asarray(keras_scores), atol=2e-3)
