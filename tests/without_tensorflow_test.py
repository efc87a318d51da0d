"""The package on a host with JAX and no TensorFlow (the GPU hosts of docs/results.md): the
models, layers, losses and `JaxTrainStep` import and train on the NumPy training windows,
`Evaluator` and the pointer diagnostics score text exactly; the text pipeline says it needs
TensorFlow.

Each child runs with KERAS_BACKEND=jax; the one without TensorFlow sets
`sys.modules["tensorflow"] = None`, so every `import tensorflow` in it raises ImportError, as on
a host where it is not installed.
"""

import json

import numpy as np

from psmm_tf import testing

STEP_CODE = """
    import json, sys
    {block}
    import keras, numpy as np
    import psmm_tf
    from psmm_tf import configs
    from psmm_tf.data import Vocabulary
    from psmm_tf.jax_train_step import JaxTrainStep
    from psmm_tf.models import WordTokenizer, build_model
    from psmm_tf.optimizers import make_optimizer

    assert keras.backend.backend() == "jax"
    preset = configs.get_preset("tiny")
    model = build_model(configs.dataclasses.replace(preset.model, kind="psmm", vocab_size=50,
                                                    seed=0))
    from psmm_tf.data import iter_training_windows
    rng = np.random.default_rng(0)
    shape = (preset.train.batch_size, preset.train.num_predicted)
    train_ids = rng.integers(0, 50, shape[0] * 2 * shape[1] + 1)
    batch = next(iter_training_windows(train_ids, shape[0], 0, shape[1], offset=1))
    step = JaxTrainStep(model, make_optimizer(preset.train), shape[0], context_length=0,
                        use_memory=True)
    state = memory = None
    losses = []
    for _ in range(2):
        metrics, state, memory = step(batch, state, memory)
        losses.append(float(metrics["loss"]))
    try:
        WordTokenizer(Vocabulary.build("the cat <eos>".split()))
        tokenizer = "built"
    except ImportError as error:
        tokenizer = str(error)
    try:
        WordTokenizer()  # as deserialisation builds it, before its vocabulary asset
        empty_tokenizer = "built"
    except ImportError as error:
        empty_tokenizer = str(error)
    from psmm_tf.evaluation import Evaluator
    from psmm_tf.evaluation.pointer_diagnostics import collect_pointer_records
    ids = rng.integers(0, 50, 40).astype("int32")
    whole = keras.ops.convert_to_numpy(
        model.score_with_state(ids[None, :-1], ids[None, 1:])["log_probs"])[0]
    result = Evaluator(model, length=7).evaluate(ids, collect=True)
    records = collect_pointer_records(model, ids, length=7)
    from psmm_tf.models import tokenizer as tokenizer_module
    print(json.dumps({{"losses": losses, "tokenizer": tokenizer,
                      "whole_nll": (-whole).tolist(), "evaluator_nll": result.nll.tolist(),
                      "records_log_prob": records["log_prob"].tolist(),
                      "empty_tokenizer": empty_tokenizer,
                      "tensorflow_found": tokenizer_module.tf is not None}}))
"""
WITHOUT_TENSORFLOW = 'sys.modules["tensorflow"] = None  # import tensorflow -> ImportError'


def _run(block):
    out = testing.run_in_fresh_process(STEP_CODE.format(block=block),
                                       env={"KERAS_BACKEND": "jax"})
    return json.loads(out.strip().splitlines()[-1])


class WithoutTensorFlowTest(testing.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.without = _run(WITHOUT_TENSORFLOW)
        cls.with_tensorflow = _run("")

    def test_jax_training_step_runs_and_equals_the_step_with_tensorflow_installed(self):
        self.assertFalse(self.without["tensorflow_found"])
        self.assertTrue(self.with_tensorflow["tensorflow_found"])
        losses = self.without["losses"]
        self.assertTrue(all(0 < loss < 1e4 for loss in losses), losses)
        self.assertLess(losses[1], losses[0])  # it learns the batch
        self.assertEqual(self.with_tensorflow["tokenizer"], "built")
        self.assertAllClose(losses, self.with_tensorflow["losses"], rtol=1e-6)

    def test_exact_evaluation_and_pointer_records_equal_scoring_the_text_whole(self):
        whole = np.array(self.without["whole_nll"])
        self.assertEqual(len(whole), 39)
        # Windows of 7 with state and memory carried: the same -log p as one call on all of it.
        self.assertAllClose(self.without["evaluator_nll"], whole, atol=1e-5)
        self.assertAllClose(-np.array(self.without["records_log_prob"]), whole, atol=1e-5)

    def test_text_pipeline_names_tensorflow_as_what_is_missing(self):
        for message in (self.without["tokenizer"], self.without["empty_tokenizer"]):
            self.assertIn("WordTokenizer", message)
            self.assertIn("TensorFlow is not installed: pip install tensorflow", message)
        self.assertEqual(self.with_tensorflow["empty_tokenizer"], "built")
