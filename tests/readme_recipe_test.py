"""The README's "use the pointer in your own Keras model" recipe, run verbatim."""

import os
import re
from pathlib import Path

import keras_hub
import numpy as np
from keras import ops

from psmm_tf import configs, testing
from psmm_tf import workdir as run_files

README = Path(__file__).resolve().parent.parent / "README.md"


def recipe_code():
    """The first python block after the README's recipe heading."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Use the pointer in your own Keras model", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


class ReadmeRecipeTest(testing.TestCase):

    def test_the_recipe_runs_and_gives_a_finite_loss(self):
        namespace = {}
        exec(compile(recipe_code(), str(README), "exec"), namespace)  # noqa: S102
        attention = ops.convert_to_numpy(namespace["attention"])
        gate = ops.convert_to_numpy(namespace["gate"])
        self.assertEqual(attention.shape, (4, 35, 19 + 35))
        # Eq. 7-8: the window's attention and the gate share one softmax.
        self.assertAllClose(attention.sum(-1) + gate, np.ones((4, 35)), atol=1e-5)
        # Every memory slot is masked: no mass before the text.
        self.assertAllEqual(attention[:, :, :19], np.zeros((4, 35, 19)))
        loss = float(ops.convert_to_numpy(namespace["loss"]))
        # Near log(vocab_size) for an untrained model, and finite.
        self.assertTrue(np.isfinite(loss))
        self.assertBetween(loss, 0.5 * np.log(1000), 2.0 * np.log(1000))


def library_blocks():
    """The python blocks of the README's "The library" section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## The library", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


class ReadmeLibraryTest(testing.TestCase):

    def test_the_keras_hub_block_loads_fine_tunes_generates_and_saves(self):
        from psmm_tf.data import Vocabulary, synthetic
        from psmm_tf.models import LanguageModelPreprocessor, LSTMBackbone, PointerSentinelLM

        # A stand-in for the quick start's run: a tiny PSMM with the synthetic corpus' words.
        lines = synthetic.generate_corpus(3000, seed=0)
        words = sorted({w for line in lines for w in line.split()} - {"<eos>", "<unk>"})
        vocabulary = Vocabulary(["<unk>", "<eos>"] + words)
        run = os.path.join(self.get_temp_dir(), "psmm_quickstart", "psmm")
        os.makedirs(run)
        trained = PointerSentinelLM(
            LSTMBackbone(len(vocabulary), 16, 16, 2, seed=0), window_size=8, seed=0,
            preprocessor=LanguageModelPreprocessor(vocabulary, sequence_length=32))
        trained.save(os.path.join(run, "model.keras"))
        run_files.write_config(run, configs.get_preset("tiny"))  # psmm-train's, beside it
        block = library_blocks()[0].replace('"/tmp/', f'"{self.get_temp_dir()}/')
        namespace = {}
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102
        model = namespace["model"]
        self.assertEqual(ops.convert_to_numpy(namespace["log_p"]).shape,
                         (1, 32, len(vocabulary)))
        prompt = "prof. rugribra , director of".split()
        generated = model.generate(" ".join(prompt), max_length=24).split()
        self.assertEqual(generated[:5], prompt)  # "rugribra", outside it, kept as given
        self.assertTrue(set(generated) <= set(vocabulary.tokens) | set(prompt), generated)
        preset = keras_hub.models.CausalLM.from_preset(os.path.join(self.get_temp_dir(),
                                                                    "psmm_finetuned"))
        self.assertIsInstance(preset, PointerSentinelLM)
        texts = namespace["texts"]
        self.assertAllClose(preset.score_text(texts)["log_probs"],
                            model.score_text(texts)["log_probs"], atol=1e-6)
        # Fine-tuning moved the weights away from the run's.
        self.assertNotAllClose(preset.score_text(texts)["log_probs"],
                               trained.score_text(texts)["log_probs"])

    def test_the_library_blocks_run_and_agree_with_numpy(self):
        blocks = library_blocks()[1:]
        self.assertLen(blocks, 2)
        namespace = {}
        exec(compile(blocks[0], str(README), "exec"), namespace)  # noqa: S102
        dist = ops.convert_to_numpy(namespace["dist"])
        self.assertAllClose(dist.sum(-1), np.ones(dist.shape[:2]), atol=1e-5)
        targets = namespace["targets"]
        picked = np.take_along_axis(dist, targets[..., None], axis=-1)[..., 0]
        self.assertAllClose(ops.convert_to_numpy(namespace["log_p"]), np.log(picked),
                            atol=1e-5)
        expected = testing.reference_pointer_loss(
            ops.convert_to_numpy(namespace["attention"]), ops.convert_to_numpy(namespace["gate"]),
            namespace["key_ids"], targets)
        self.assertAllClose(ops.convert_to_numpy(namespace["nll_ptr"]), expected, atol=1e-5)
        namespace = {}
        exec(compile(blocks[1], str(README), "exec"), namespace)  # noqa: S102
        # The block says it builds the `medium` preset's network and start.
        from psmm_tf.configs import get_preset
        from psmm_tf.models import model_config_differences

        medium, model = get_preset("medium").model, namespace["model"]
        self.assertEqual(model_config_differences(model, medium), [])
        for name in ("input_dropout", "hidden_dropout", "zoneout", "init_scale"):
            self.assertEqual(getattr(model.backbone, name), getattr(medium, name), name)
        self.assertEqual(model.output_dropout, medium.output_dropout)


if __name__ == "__main__":
    import tensorflow as tf

    tf.test.main()
