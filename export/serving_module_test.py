"""Tests of the exported signatures against the Keras model: scores, streaming, padding, threads,
next-word prediction, tokenization and the errors of bad inputs."""

import concurrent.futures
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from psmm_tf import testing as psmm_testing
from psmm_tf.data import Vocabulary, read_tokens
from psmm_tf.export import STATE_NAMES, testing, tokenization
from psmm_tf.export.serving_module import ServingModule

TRICKY_TEXTS = [
    "the cat sat on the mat",
    "a dog ran\nto the zebra house",  # two lines, one word outside the vocabulary
    "the\u00a0cat\x1csat  \t the\u2028cat\x0bdog\n",  # Python-only whitespace, final newline
    "\n",  # one blank line: one <eos>
    "  the big red \u3000 tree  \n\n",  # a line, then a blank one
]


class ServingModuleTest(psmm_testing.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp()
        cls.model, vocab_file, export_dir = testing.shared_export()
        cls.vocab = Vocabulary.load(vocab_file)
        cls.signatures = tf.saved_model.load(export_dir).signatures

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def call(self, name, **inputs):
        return {k: v.numpy() for k, v in self.signatures[name](**inputs).items()}

    def keras_scores(self, ids):
        """Keras `score()` of one text's token ids, read after a leading <eos>."""
        ids = np.asarray(ids, np.int32)[None]
        inputs = np.concatenate([[[self.vocab.eos_id]], ids[:, :-1]], axis=1)
        out = self.model.score_with_state(inputs, ids)
        return out["log_probs"].numpy()[0], out["gate"].numpy()[0]

    def test_tokenization_matches_the_corpus_reader(self):
        result = self.call("serving_default", texts=tf.constant(TRICKY_TEXTS))
        for row, text in enumerate(TRICKY_TEXTS):
            path = os.path.join(self.tmp, "text.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            expected = read_tokens(path)
            self.assertEqual(tokenization.reference_tokens(text), expected)
            count = result["num_tokens"][row]
            self.assertEqual([t.decode() for t in result["tokens"][row][:count]], expected)
            self.assertAllEqual(result["tokens"][row][count:], [b""] * (len(
                result["tokens"][row]) - count))

    def test_score_text_equals_keras_score(self):
        result = self.call("serving_default", texts=tf.constant(TRICKY_TEXTS))
        for row, text in enumerate(TRICKY_TEXTS):
            ids = self.vocab.encode(tokenization.reference_tokens(text))
            log_probs, gate = self.keras_scores(ids)
            n = len(ids)
            self.assertEqual(result["num_tokens"][row], n)
            self.assertAllEqual(result["token_ids"][row][:n], ids)
            self.assertAllClose(result["log_probs"][row][:n], log_probs, atol=1e-5)
            self.assertAllClose(result["gate"][row][:n], gate, atol=1e-5)
            for name in ("log_probs", "gate"):  # zeros in the padding
                self.assertAllEqual(result[name][row][n:], np.zeros_like(result[name][row][n:]))
            self.assertAllClose(result["log_likelihood"][row], log_probs.sum(), atol=1e-4)
            self.assertAllClose(result["perplexity"][row], np.exp(-log_probs.sum() / n),
                                rtol=1e-4)
        # The pointer is at work: the gate is neither 0 nor 1.
        self.assertBetween(float(result["gate"][0, 3]), 0.01, 0.99)

    def test_padded_ids_equal_one_by_one(self):
        lengths = [3, 11, 6]
        rows = [self.rng.integers(0, len(self.vocab), size=n).astype(np.int32) for n in lengths]
        padded = np.full([3, 11], -7, np.int32)  # padding may hold any value
        for row, ids in enumerate(rows):
            padded[row, :len(ids)] = ids
        batch = self.call("score", token_ids=tf.constant(padded), lengths=tf.constant(lengths))
        for row, ids in enumerate(rows):
            single = self.call("score", token_ids=tf.constant(ids[None]),
                               lengths=tf.constant([len(ids)]))
            log_probs, gate = self.keras_scores(ids)
            n = len(ids)
            self.assertAllClose(batch["log_probs"][row][:n], single["log_probs"][0], atol=1e-5)
            self.assertAllClose(batch["log_probs"][row][:n], log_probs, atol=1e-5)
            self.assertAllClose(batch["gate"][row][:n], gate, atol=1e-5)
            self.assertAllClose(batch["perplexity"][row], single["perplexity"][0], rtol=1e-5)

    def test_three_streamed_pieces_equal_the_whole(self):
        # Two documents, cut at different places: every piece is a padded batch.
        docs = [self.rng.integers(0, len(self.vocab), size=n).astype(np.int32) for n in (30, 23)]
        cuts = [(0, 4, 19, 30), (0, 12, 14, 23)]
        whole = [self.keras_scores(doc)[0] for doc in docs]
        state = self.call("initial_state", stream_ids=tf.range(2))
        pieces = [[], []]
        for piece in range(3):
            lengths = [cut[piece + 1] - cut[piece] for cut in cuts]
            ids = np.zeros([2, max(lengths)], np.int32)
            for row, (doc, cut) in enumerate(zip(docs, cuts, strict=True)):
                ids[row, :lengths[row]] = doc[cut[piece]:cut[piece + 1]]
            out = self.call("score_stream", token_ids=tf.constant(ids),
                            lengths=tf.constant(lengths), **state)
            state = {name: out[name] for name in STATE_NAMES}
            for row in range(2):
                pieces[row].append(out["log_probs"][row][:lengths[row]])
        for row in range(2):
            self.assertAllClose(np.concatenate(pieces[row]), whole[row], atol=1e-5)

    def test_streamed_text_equals_the_whole_text(self):
        lines = ["the cat sat on the mat", "", "a zebra saw the cat", "the cat ran to the zebra",
                 "his dog was big", "and the red bird saw it"]
        whole = self.call("serving_default", texts=tf.constant(["\n".join(lines)]))
        state = self.call("initial_state", stream_ids=tf.range(1))
        log_probs = []
        for chunk in (lines[:2], lines[2:3], lines[3:]):
            out = self.call("score_text_stream", texts=tf.constant(["\n".join(chunk) + "\n"]),
                            **state)
            state = {name: out[name] for name in STATE_NAMES}
            log_probs.append(out["log_probs"][0][:out["num_tokens"][0]])
        self.assertAllClose(np.concatenate(log_probs), whole["log_probs"][0], atol=1e-5)

    def test_sixteen_threads_equal_serial(self):
        requests = [[" ".join(self.rng.choice(testing.WORDS[2:], size=int(n)))
                     for n in self.rng.integers(1, 30, size=3)] for _ in range(32)]
        serial = [self.call("serving_default", texts=tf.constant(r))["log_probs"]
                  for r in requests]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            parallel = list(pool.map(
                lambda r: self.call("serving_default", texts=tf.constant(r))["log_probs"],
                requests))
        for a, b in zip(serial, parallel, strict=True):
            self.assertAllClose(a, b, atol=1e-6)

    def test_predict_next_is_the_full_mixture_with_context_words(self):
        # "zebra" and "gnu" are outside the vocabulary; "zebra" is in the window twice.
        contexts = ["the cat saw a zebra and the zebra saw a gnu and the", "", "a dog\n",
                    "gnu the cat sat on the mat and it was big and red and the dog ran to"]
        k = 8
        out = self.call("predict_next", texts=tf.constant(contexts), k=tf.constant(k))
        window = self.model.window_size
        for row, context in enumerate(contexts):
            words = ["<eos>"] + tokenization.reference_tokens(context, finish_last_line=False)
            ids = self.vocab.encode(words)
            outputs = self.model(ids[None])
            keras_dist = self.model.distribution(outputs).numpy()[0, -1]
            attention = outputs["attention"].numpy()[0, -1]
            # Expected: the Keras mixture, with the pointer's mass on out-of-vocabulary words
            # moved from <unk> to the words themselves.
            expected = {w: p for w, p in zip(self.vocab.tokens, keras_dist, strict=True)}
            pointer = {}
            for position, word in enumerate(words):
                pointer[word] = pointer.get(word, 0.0) + attention[position]
                if word not in self.vocab:
                    expected["<unk>"] -= attention[position]
                    expected[word] = expected.get(word, 0.0) + attention[position]
            self.assertAllClose(sum(expected.values()), 1.0, atol=1e-5)
            top = sorted(expected.items(), key=lambda item: -item[1])[:k]
            got_words = [w.decode() for w in out["top_words"][row]]
            self.assertAllClose(out["top_probs"][row], [p for _, p in top], atol=1e-5)
            for word, prob in zip(got_words, out["top_probs"][row], strict=True):
                self.assertAllClose(expected[word], prob, atol=1e-5)
            self.assertAllClose(out["gate"][row], outputs["gate"].numpy()[0, -1], atol=1e-6)
            ranked = sorted(pointer.items(), key=lambda item: -item[1])[:min(k, window)]
            got = out["pointer_probs"][row]
            self.assertAllClose(got[:len(ranked)], [p for _, p in ranked], atol=1e-5)
            for word, prob in zip(out["pointer_words"][row], got, strict=True):
                if prob > 0:
                    self.assertAllClose(pointer[word.decode()], prob, atol=1e-5)
        # A word outside the vocabulary is predicted by copying it, under an id >= V.
        out = self.call("predict_next", texts=tf.constant(contexts[:1]),
                        k=tf.constant(len(self.vocab)))
        words = list(out["top_words"][0])
        self.assertIn(b"zebra", words)
        self.assertGreaterEqual(out["top_ids"][0][words.index(b"zebra")], len(self.vocab))

    def test_other_model_kinds(self):
        # The endpoints in process (no save): the LSTM baseline has no pointer (gate 1) and
        # the pointer softmax a switch instead of the sentinel; both score as Keras does.
        vocab_file = testing.shared_export()[1]
        texts = ["the cat sat on the mat", "a zebra saw his dog"]
        for kind in ("lstm", "pointer_softmax"):
            model, _ = testing.tiny_model(kind=kind)
            module = ServingModule(model, vocab_file)
            out = module.score_text({"texts": tf.constant(texts)})
            for row, text in enumerate(texts):
                ids = self.vocab.encode(tokenization.reference_tokens(text))[None]
                inputs = np.concatenate([[[self.vocab.eos_id]], ids[:, :-1]], axis=1)
                expected = model.score_with_state(inputs, ids)
                n = ids.shape[1]
                self.assertAllClose(out["log_probs"][row][:n], expected["log_probs"][0],
                                    atol=1e-5)
                self.assertAllClose(out["gate"][row][:n], expected["gate"][0], atol=1e-5)
            top = module.predict_next({"texts": tf.constant(texts), "k": tf.constant(3)})
            ids = self.vocab.encode(["<eos>"] + texts[0].split())  # no word outside the vocab
            dist = model.distribution(model(ids[None])).numpy()[0, -1]
            self.assertAllClose(top["top_probs"][0], np.sort(dist)[::-1][:3], atol=1e-6)
            if kind == "lstm":  # nothing to point with
                self.assertAllEqual(top["pointer_probs"], np.zeros([2, 3]))
