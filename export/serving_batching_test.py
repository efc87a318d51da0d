"""Server-side batching: every signature input is batch-major, so 2 one-row requests concatenated
along the first dimension (as TF Serving's batching does) answer as the 2 requests do; the
batching parameters file; the streaming state sizes of docs/serving.md."""

import os
import re

import numpy as np
import tensorflow as tf
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_format,
    wrappers_pb2,
)

from psmm_tf import configs
from psmm_tf.export import STATE_NAMES, state_size, testing, warmup

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTEXTS = ["the cat sat on the mat and the", "a zebra saw the dog\nhis"]


def batching_parameters_class():
    """`tensorflow.serving.BatchingParameters` (session_bundle_config.proto; not in
    tensorflow-serving-api): the fields TF Serving reads from --batching_parameters_file."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="psmm_test/batching_parameters.proto", package="tensorflow.serving",
        dependency=["google/protobuf/wrappers.proto"], syntax="proto3")
    message = proto.message_type.add(name="BatchingParameters")
    optional, repeated = (descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
                          descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED)
    types = descriptor_pb2.FieldDescriptorProto
    for number, name in enumerate(("max_batch_size", "batch_timeout_micros",
                                   "max_enqueued_batches", "num_batch_threads"), start=1):
        message.field.add(name=name, number=number, label=optional, type=types.TYPE_MESSAGE,
                          type_name=".google.protobuf.Int64Value")
    message.field.add(name="thread_pool_name", number=5, label=optional,
                      type=types.TYPE_MESSAGE, type_name=".google.protobuf.StringValue")
    message.field.add(name="allowed_batch_sizes", number=6, label=repeated,
                      type=types.TYPE_INT64)
    message.field.add(name="pad_variable_length_inputs", number=7, label=optional,
                      type=types.TYPE_BOOL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))


class BatchedRequestTest(tf.test.TestCase):
    """Through TF Serving's loader (TF1 session, tensors fed by their signature names)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.export_dir = testing.shared_export()[2]

    def assert_rows_equal(self, batched, singles, atol=1e-6):
        self.assertEqual(set(batched), set(singles[0]))
        for name, value in batched.items():
            for row, single in enumerate(singles):
                got, want = value[row], single[name][0]
                if value.dtype.kind in "OSU":
                    self.assertAllEqual(got, want, msg=name)
                else:
                    self.assertAllClose(got, want, atol=atol, msg=name)

    def test_two_rows_answer_as_two_one_row_requests(self):
        with testing.tf1_session_signatures(self.export_dir) as run:
            # initial_state: one row per stream_ids entry, each the fresh state.
            state = run("initial_state", {"stream_ids": np.array([7, 9], np.int32)})
            singles = [run("initial_state", {"stream_ids": np.array([i], np.int32)})
                       for i in (7, 9)]
            self.assertEqual(sorted(state), sorted(STATE_NAMES))
            for name in STATE_NAMES:
                self.assertEqual(state[name].shape[0], 2, name)
            self.assert_rows_equal(state, singles)

            # predict_next with one k per row, as a batching server concatenates them.
            batched = run("predict_next", {"texts": np.array(CONTEXTS, object),
                                           "k": np.array([5, 5], np.int32)})
            singles = [run("predict_next", {"texts": np.array([c], object),
                                            "k": np.array([5], np.int32)}) for c in CONTEXTS]
            self.assertEqual(batched["top_words"].shape, (2, 5))
            self.assert_rows_equal(batched, singles, atol=1e-5)

            # Two requests with other k batched together: K = the larger, the other row padded.
            mixed = run("predict_next", {"texts": np.array(CONTEXTS, object),
                                         "k": np.array([2, 5], np.int32)})
            self.assertEqual(mixed["top_words"].shape, (2, 5))
            self.assertAllEqual(mixed["top_words"][0, :2], singles[0]["top_words"][0, :2])
            self.assertAllClose(mixed["top_probs"][0, :2], singles[0]["top_probs"][0, :2],
                                atol=1e-5)
            self.assertAllEqual(mixed["top_words"][0, 2:], [b""] * 3)
            self.assertAllEqual(mixed["top_ids"][0, 2:], [-1] * 3)
            self.assertAllEqual(mixed["top_probs"][0, 2:], [0.0] * 3)
            self.assertAllEqual(mixed["pointer_probs"][0, 2:], [0.0] * 3)
            self.assertAllEqual(mixed["top_words"][1], singles[1]["top_words"][0])

            # A scalar k (clients from before batch-major inputs) is the same k for every row.
            scalar = run("predict_next", {"texts": np.array(CONTEXTS, object),
                                          "k": np.array(5, np.int32)})
            for name, value in batched.items():
                self.assertAllEqual(scalar[name], value)

            # The batched state streams as the two one-row states do.
            texts = np.array(["the cat sat\n", "a dog ran to the house\n"], object)
            both = run("score_text_stream", {"texts": texts, **state})
            fresh = run("initial_state", {"stream_ids": np.array([0], np.int32)})
            one_by_one = [run("score_text_stream", {"texts": texts[i:i + 1], **fresh})
                          for i in range(2)]
            for row, single in enumerate(one_by_one):
                n = single["num_tokens"][0]
                self.assertAllClose(both["log_probs"][row, :n], single["log_probs"][0, :n],
                                    atol=1e-5)
                for name in STATE_NAMES:
                    self.assertAllClose(both[name][row], single[name][0], atol=1e-5)

    def test_state_bytes_per_stream_are_the_exports(self):
        _, config = testing.tiny_model()
        with testing.tf1_session_signatures(self.export_dir) as run:
            state = run("initial_state", {"stream_ids": np.arange(3, dtype=np.int32)})
        sizes = state_size.streaming_state_bytes(config.model)
        for name in STATE_NAMES:
            self.assertEqual(state[name].nbytes // 3, sizes[name], name)
        self.assertEqual(sum(state[name].nbytes for name in STATE_NAMES) // 3, sizes["total"])

    def test_warmup_requests_are_batch_major(self):
        requests = warmup.warmup_inputs(testing.WORDS, 2, 16, 7, 1)
        for signature, inputs in requests:
            rows = {name: np.shape(value)[0] for name, value in inputs.items()}
            self.assertLen(set(rows.values()), 1, (signature, rows))


class BatchingFilesTest(tf.test.TestCase):
    def test_batching_parameters_parse(self):
        path = os.path.join(os.path.dirname(__file__), "batching_parameters.txt")
        with open(path) as f:
            params = text_format.Parse(f.read(), batching_parameters_class()())
        self.assertTrue(params.pad_variable_length_inputs)
        self.assertGreater(params.max_batch_size.value, 1)
        self.assertGreater(params.batch_timeout_micros.value, 0)
        self.assertGreater(params.num_batch_threads.value, 0)
        self.assertGreater(params.max_enqueued_batches.value, 0)

    def test_docs_state_table_is_computed(self):
        doc = open(os.path.join(REPO_ROOT, "docs", "serving.md"), encoding="utf-8").read()
        self.assertIn(state_size.state_size_table(), doc)
        medium = state_size.streaming_state_bytes(configs.get_preset("medium").model)
        # By hand: 2 layers x (h, c) x 650 floats + 99 x 650 floats + 99 ids + 99 bools + 1 id
        # + 1 vocabulary fingerprint.
        self.assertEqual(medium["total"],
                         4 * 2 * 2 * 650 + 4 * 99 * 650 + 4 * 99 + 99 + 4 + 4)
        self.assertRegex(doc, re.escape("--batching_parameters_file="))


if __name__ == "__main__":
    tf.test.main()
