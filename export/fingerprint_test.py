"""The vocabulary fingerprint of the stream state (docs/hostile_inputs.md, row 242): a state of an
export of another vocabulary, of the same sizes, is refused; the export's own still streams."""

import hashlib
import os
import shutil
import struct
import tempfile

import numpy as np
import tensorflow as tf

from psmm_tf.export import STATE_NAMES, testing, warmup
from psmm_tf.export.clients import LocalClient, ServingError
from psmm_tf.export.export_saved_model import export
from psmm_tf.export.fingerprint import vocabulary_fingerprint

# The same 24 tokens as testing.WORDS, the ordinary words in reverse order: the same sizes, but
# every id of a carried state names another word.
OTHER_WORDS = testing.WORDS[:2] + testing.WORDS[:1:-1]
LINES = ["the cat sat on the mat", "a dog ran to the house", "his big red bird saw it"]


def refusal(row, fingerprint, expected):
    """The message pattern of a state row of another vocabulary."""
    return (rf"`vocabulary_fingerprint`: state row {row} came from an export of another "
            rf"vocabulary \(fingerprint {fingerprint}; this export has {expected}\): start "
            rf"again with initial_state")


class VocabularyFingerprintTest(tf.test.TestCase):

    def test_the_first_four_bytes_of_the_sha256_as_a_signed_big_endian_int32(self):
        for tokens in (testing.WORDS, OTHER_WORDS, ["<unk>", "<eos>", "caf\u00e9", "\u732b"]):
            digest = hashlib.sha256(("\n".join(tokens)).encode("utf-8")).digest()
            (expected,) = struct.unpack(">i", digest[:4])
            self.assertEqual(vocabulary_fingerprint(tokens), expected)
        # By hand: SHA-256("a\nb") begins 7e18f737 (high bit clear: positive), SHA-256("b\na")
        # begins c4a78e5b (high bit set: that minus 2**32).
        self.assertEqual(hashlib.sha256(b"a\nb").hexdigest()[:8], "7e18f737")
        self.assertEqual(vocabulary_fingerprint(["a", "b"]), 0x7E18F737)
        self.assertEqual(hashlib.sha256(b"b\na").hexdigest()[:8], "c4a78e5b")
        self.assertEqual(vocabulary_fingerprint(["b", "a"]), 0xC4A78E5B - 2**32)
        self.assertNotEqual(vocabulary_fingerprint(["a", "b"]), vocabulary_fingerprint(["b", "a"]))


class StateOfAnotherVocabularyTest(tf.test.TestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp()
        model, words_file, cls.export_a = testing.shared_export()
        other_file = testing.write_vocabulary(os.path.join(cls.tmp, "vocab.txt"), OTHER_WORDS)
        cls.export_b = export(model, other_file, os.path.join(cls.tmp, "base"))
        cls.a = tf.saved_model.load(cls.export_a).signatures
        cls.b = tf.saved_model.load(cls.export_b).signatures
        cls.fingerprint_a = vocabulary_fingerprint(testing.WORDS)
        cls.fingerprint_b = vocabulary_fingerprint(OTHER_WORDS)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def stream(self, signatures, state, pieces):
        """`score_text_stream` of one text per row in `pieces` (lists of rows); returns the
        log-probabilities of each row, concatenated, and the last state."""
        log_probs = [[] for _ in pieces[0]]
        for piece in pieces:
            out = signatures["score_text_stream"](texts=tf.constant(piece), **state)
            state = {name: out[name] for name in STATE_NAMES}
            for row in range(len(piece)):
                log_probs[row].append(out["log_probs"][row][:out["num_tokens"][row]].numpy())
        return [np.concatenate(row) for row in log_probs], state

    def test_initial_state_holds_the_exports_fingerprint(self):
        for signatures, fingerprint in ((self.a, self.fingerprint_a),
                                        (self.b, self.fingerprint_b)):
            state = signatures["initial_state"](stream_ids=tf.range(3))
            self.assertAllEqual(state["vocabulary_fingerprint"], [fingerprint] * 3)
        self.assertNotEqual(self.fingerprint_a, self.fingerprint_b)

    def test_a_state_of_another_vocabulary_is_refused(self):
        state = self.a["initial_state"](stream_ids=tf.range(2))
        _, state = self.stream(self.a, state, [[LINES[0] + "\n", LINES[1] + "\n"]])
        for signature, inputs in (
                ("score_text_stream", {"texts": tf.constant(LINES[1:])}),
                ("score_stream", {"token_ids": tf.constant([[2, 3], [4, 5]]),
                                  "lengths": tf.constant([2, 1])})):
            with self.subTest(signature=signature):
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                            refusal(0, self.fingerprint_a, self.fingerprint_b)):
                    self.b[signature](**inputs, **state)
        # One row of B's own state and one of A's: the message names the row of A's.
        own = self.b["initial_state"](stream_ids=tf.range(2))
        mixed = {name: tf.concat([own[name][:1], state[name][1:]], axis=0)
                 for name in STATE_NAMES}
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    refusal(1, self.fingerprint_a, self.fingerprint_b)):
            self.b["score_text_stream"](texts=tf.constant(LINES[1:]), **mixed)
        # And the other way round, through the client psmm-score uses (its short message).
        client = LocalClient(self.export_a)
        own_b = {name: value.numpy() for name, value in own.items()}
        with self.assertRaisesRegex(ServingError, "^assertion failed: \\[" + refusal(
                0, self.fingerprint_b, self.fingerprint_a)):
            client.predict("score_text_stream", {"texts": np.array(LINES[:2], object), **own_b})

    def test_a_state_of_another_vocabulary_is_refused_in_a_tf1_session(self):
        # TF Serving's path: the check is in the graph.
        state = {name: value.numpy() for name, value in
                 self.a["initial_state"](stream_ids=tf.range(1)).items()}
        with testing.tf1_session_signatures(self.export_b) as run:
            with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                        refusal(0, self.fingerprint_a, self.fingerprint_b)):
                run("score_text_stream", {"texts": LINES[:1], **state})
            own = run("initial_state", {"stream_ids": [0]})
            out = run("score_text_stream", {"texts": LINES[:1], **own})
            self.assertAllEqual(out["vocabulary_fingerprint"], [self.fingerprint_b])

    def test_the_exports_own_state_streams_as_the_whole_text(self):
        pieces = [[LINES[0] + "\n", LINES[2] + "\n"], [LINES[1] + "\n", LINES[0] + "\n"]]
        wholes = [pieces[0][row] + pieces[1][row] for row in range(2)]
        for signatures, fingerprint in ((self.a, self.fingerprint_a),
                                        (self.b, self.fingerprint_b)):
            whole = signatures["serving_default"](texts=tf.constant(wholes))
            streamed, state = self.stream(
                signatures, signatures["initial_state"](stream_ids=tf.range(2)), pieces)
            for row in range(2):
                self.assertAllClose(streamed[row], whole["log_probs"][row][
                    :whole["num_tokens"][row]], atol=1e-5)
            self.assertAllEqual(state["vocabulary_fingerprint"], [fingerprint] * 2)
        # The two exports read the same text as other ids: their scores differ.
        a, b = (s["serving_default"](texts=tf.constant(wholes)) for s in (self.a, self.b))
        self.assertNotAllEqual(a["token_ids"], b["token_ids"])
        self.assertGreater(np.abs(a["log_likelihood"] - b["log_likelihood"]).max(), 1e-3)

    def test_warmup_requests_carry_the_exports_fingerprint(self):
        logs = warmup.read_warmup_file(
            os.path.join(self.export_b, "assets.extra", warmup.WARMUP_FILE))
        streams = 0
        for log in logs:
            request = log.predict_log.request
            if request.model_spec.signature_name in ("score_text_stream", "score_stream"):
                streams += 1
                fingerprints = tf.make_ndarray(request.inputs["vocabulary_fingerprint"])
                self.assertAllEqual(fingerprints, [self.fingerprint_b] * len(fingerprints))
        self.assertEqual(streams, 4)  # two stream signatures at two batch sizes


if __name__ == "__main__":
    tf.test.main()
