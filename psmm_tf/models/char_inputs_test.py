"""Models with character-CNN word inputs (`input_embedding="chars"`)."""

import dataclasses

import keras
import numpy as np

from psmm_tf import configs, testing
from psmm_tf.data import Vocabulary
from psmm_tf.data.corpus import EOS_TOKEN
from psmm_tf.data.spelling import spell_splits, word_characters
from psmm_tf.evaluation import Evaluator
from psmm_tf.models import LanguageModelPreprocessor, build_model, expected_parameter_count

WORDS = ["<unk>", "<eos>", "the", "cat", "sat", "on", "mat", "a"]


def _model(kind="psmm", preprocessor=None):
    config = dataclasses.replace(configs.get_preset("tiny").model, kind=kind, seed=4,
                                 vocab_size=len(WORDS), input_embedding="chars",
                                 max_word_length=10)
    model = build_model(config, preprocessor=preprocessor)
    model.set_vocabulary(WORDS)
    return config, model


def _trainable(layer):
    return sum(int(np.prod(w.shape)) for w in layer.trainable_weights)


class CharInputsTest(testing.TestCase):

    def test_parameters_are_the_counted_ones_and_the_table_is_gone(self):
        for kind in ("psmm", "lstm"):
            config, model = _model(kind)
            # The spelling is a constant (an int32 weight), not a parameter.
            self.assertEqual(_trainable(model), expected_parameter_count(config))
            ids_config = dataclasses.replace(config, input_embedding="ids")
            self.assertEqual(expected_parameter_count(config)
                             - expected_parameter_count(ids_config),
                             _trainable(model.backbone.embedding)
                             - len(WORDS) * config.embedding_dim)

    def test_saved_and_loaded_it_scores_the_same(self):
        _, model = _model()
        ids = np.array([[2, 3, 4, 5, 2, 6, 1, 7, 3]], "int32")
        path = self.get_temp_dir() + "/chars.keras"
        model.save(path)
        loaded = keras.saving.load_model(path)
        self.assertEqual(loaded.input_embedding, "chars")
        self.assertAllClose(loaded.score_with_state(ids[:, :-1], ids[:, 1:])["log_probs"],
                            model.score_with_state(ids[:, :-1], ids[:, 1:])["log_probs"], atol=1e-6)

    def test_unknown_words_read_from_their_characters_change_the_prediction(self):
        _, model = _model()
        ids = np.array([[2, 0, 4]], "int32")  # "the <unk> sat"
        memory = model.empty_memory(1)
        spelled = {word: model(ids, memory=memory, token_chars=word_characters(
            ["the", word, "sat"], 10)[None])["vocab_logits"] for word in ("dog", "cow", "<unk>")}
        self.assertGreater(np.abs(spelled["dog"] - spelled["cow"]).max(), 1e-5)
        # Spelling <unk> itself is what the ids alone give.
        self.assertAllClose(spelled["<unk>"], model(ids, memory=memory)["vocab_logits"],
                            atol=1e-6)

    def test_score_text_reads_unknown_words_from_their_characters(self):
        _, model = _model(preprocessor=LanguageModelPreprocessor(Vocabulary(WORDS)))
        dog, cow = model.score_text(["the dog sat on a mat", "the cow sat on a mat"])[
            "log_likelihood"]
        self.assertGreater(abs(dog - cow), 1e-5)

    def test_score_text_in_pieces_equals_the_evaluators_spelled_pass(self):
        # A text longer than one scoring piece: the same numbers as the evaluator's pass over
        # the corpus's ids and spelling.
        _, model = _model(preprocessor=LanguageModelPreprocessor(Vocabulary(WORDS)))
        text = " ".join(["the dog sat on the mat"] * 30)
        scored = model.score_text([text])
        tokens = [EOS_TOKEN] + scored["tokens"][0]
        spelling = spell_splits({"text": tokens}, Vocabulary(WORDS), 10)["text"]
        result = Evaluator(model, length=37).evaluate(Vocabulary(WORDS).encode(tokens),
                                                      spelling=spelling)
        self.assertAllClose(-scored["log_likelihood"][0], result.nll_sum, rtol=1e-5)

    def test_bad_token_chars_are_named(self):
        _, model = _model()
        ids = np.array([[2, 3]])
        with self.assertRaisesRegex(ValueError, r"`token_chars` must have shape \(1, 2, 10\)"):
            model.score_with_state(ids, ids, token_chars=np.zeros((1, 2, 24), "int32"))
        with self.assertRaisesRegex(ValueError, r"character ids outside \[0, 259\)"):
            model.score_with_state(ids, ids, token_chars=np.full((1, 2, 10), 300))
        config = dataclasses.replace(configs.get_preset("tiny").model, vocab_size=len(WORDS))
        with self.assertRaisesRegex(ValueError, "the model reads ids only"):
            build_model(config).score_with_state(ids, ids,
                                                 token_chars=np.zeros((1, 2, 24), "int32"))

    def test_token_chars_need_the_chars_embedding(self):
        config = dataclasses.replace(configs.get_preset("tiny").model, vocab_size=len(WORDS))
        model = build_model(config)
        with self.assertRaisesRegex(ValueError, "token_chars needs input_embedding='chars'"):
            model(np.array([[2, 3]]), memory=model.empty_memory(1),
                  token_chars=word_characters(["the", "cat"], 24)[None])


if __name__ == "__main__":
    testing.main()
