"""Runtime checks of signature inputs: every failure is an InvalidArgumentError naming the input.

Signature inputs are declared with unknown rank, so a wrong rank reaches the graph (in every
loader: `tf.saved_model.load`, a TF1 session, TF Serving) and is reported here by name. The
checks are `tf.debugging` asserts; the serving functions are never XLA-compiled, so they run.

Control dependencies alone do not order an assert before the ops that would fail on the same
bad input with an unrelated message (grappler prunes and reorders them: a `tf.ensure_shape`
after a rank assert fails first). So checks run in stages, each inside a function that is not
inlined (`_noinline`): its outputs exist only once all of its asserts have passed, and the
next stage and the model read only those outputs. Stage 1 checks ranks (after it the tensors
get static ranks), stage 2 shapes against each other, stage 3 values; every check's own ops
are safe on any input that passed the stages before it.
"""

import tensorflow as tf

from psmm_tf.compiled import graph_function


def after_checks(tensors, checks):
    """`tensors` (a dict) as returned by a non-inlined function that first runs `checks`.

    Args:
        tensors: dict of name -> tensor.
        checks: callable taking the dict (inside the function) and returning a list of assert
            ops. It must not be called outside: asserts in the caller's graph are unordered.

    Returns:
        A dict with the same keys: the tensors, available only if every assert passed.
    """

    def stage(values):
        with tf.control_dependencies(checks(values)):
            return {name: tf.identity(value) for name, value in values.items()}

    return graph_function(stage, jit_compile=False,
                          experimental_attributes={"_noinline": True})(tensors)


def rank_check(name, tensor, rank, meaning, scalar_ok=False):
    """Assert that `tensor` has `rank` dimensions (`meaning` names them, e.g. "[batch_size]"),
    or is a scalar if `scalar_ok` (an input older clients send as one value for the batch)."""
    if scalar_ok:
        return tf.debugging.Assert(
            tf.logical_or(tf.equal(tf.rank(tensor), rank), tf.equal(tf.rank(tensor), 0)),
            [f"`{name}` must have rank {rank}, {meaning} (or 0, one value for every row); got "
             "rank", tf.rank(tensor)])
    return tf.debugging.assert_equal(
        tf.rank(tensor), rank,
        message=f"`{name}` must have rank {rank}, {meaning}; got a tensor of another rank.")


def shape_check(name, tensor, expected, meaning):
    """Assert that `tensor`'s shape (known rank) is `expected` (int32 vector of that rank)."""
    return tf.debugging.assert_equal(tf.shape(tensor), tf.cast(tf.stack(expected), tf.int32),
                                     message=f"`{name}` must have shape {meaning}.")


def ids_check(name, ids, vocab_size, where=None):
    """Assert `0 <= ids < vocab_size`, only where `where` (same shape) is True if given."""
    valid = tf.logical_and(ids >= 0, ids < vocab_size)
    if where is not None:
        valid = tf.logical_or(valid, tf.logical_not(where))
    return tf.debugging.Assert(
        tf.reduce_all(valid),
        [f"`{name}` holds a token id outside [0, {vocab_size}) (the vocabulary size); "
         "offending ids:", tf.boolean_mask(ids, tf.logical_not(valid))],
        summarize=10)


def lengths_checks(name, lengths, ids_name, time):
    """Asserts `1 <= lengths <= time`, the time dimension of `ids_name`."""
    return [
        tf.debugging.Assert(
            tf.reduce_all(lengths >= 1),
            [f"`{name}` must be >= 1 (a text with no token has nothing to score); got:",
             lengths], summarize=10),
        tf.debugging.Assert(
            tf.reduce_all(lengths <= time),
            [f"`{name}` must be <= the time dimension of `{ids_name}`; time and lengths:",
             time, lengths], summarize=10),
    ]


def text_checks(name, texts, allow_empty):
    """Asserts valid UTF-8 and, unless `allow_empty`, no empty string."""
    transcoded = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
    checks = [tf.debugging.Assert(
        tf.reduce_all(tf.equal(transcoded, texts)),
        [f"`{name}` holds text that is not valid UTF-8, at indices:",
         tf.where(tf.not_equal(transcoded, texts))], summarize=10)]
    if not allow_empty:
        checks.append(tf.debugging.Assert(
            tf.reduce_all(tf.strings.length(texts) > 0),
            [f"`{name}` holds an empty string (nothing to score), at indices:",
             tf.where(tf.equal(tf.strings.length(texts), 0))], summarize=10))
    return checks


def range_check(name, value, low, high):
    """Assert `low <= value <= high` (a scalar, or every element of a tensor)."""
    return tf.debugging.Assert(
        tf.reduce_all(tf.logical_and(value >= low, value <= high)),
        [f"`{name}` must be in [{low}, {high}]; got", value], summarize=10)


def finite_check(name, values):
    """Assert that float `values` hold no NaN or infinity (a state is a previous call's output)."""
    finite = tf.math.is_finite(values)
    return tf.debugging.Assert(
        tf.reduce_all(finite),
        [f"`{name}` holds NaN or infinite values (a state must be the finite output of "
         "`initial_state` or a previous call), at indices:", tf.where(tf.logical_not(finite))],
        summarize=10)


def size_check(name, tokens, limit):
    """Assert that a request's `(batch, time)` tokens number at most `limit` in all."""
    return tf.debugging.Assert(
        tf.size(tokens, out_type=tf.int64) <= limit,
        [f"`{name}` is too long: a request holds at most {limit} tokens (batch_size x the "
         "longest text's tokens); split the text (`score_text_stream` carries the state "
         "between pieces). Got [batch_size, tokens]:", tf.shape(tokens)])


def batch_check(name, values):
    """Assert that `values` (rank 1, checked before) holds at least one element."""
    return tf.debugging.Assert(
        tf.size(values) > 0,
        [f"`{name}` is an empty batch (shape [0]): nothing to score; send at least one text."])


def fingerprint_check(name, fingerprints, expected):
    """Assert that every row of `fingerprints` (int32 `(B,)`, shape checked before) is
    `expected`, the export's vocabulary fingerprint; the message names the first other row."""
    other = tf.not_equal(fingerprints, expected)
    # -1 and 0 after the real values: the message's ops are safe on an empty batch.
    row = tf.concat([tf.where(other)[:, 0], [-1]], axis=0)[0]
    value = tf.concat([tf.boolean_mask(fingerprints, other), [0]], axis=0)[0]
    message = tf.strings.format(
        f"`{name}`: state row {{}} came from an export of another vocabulary (fingerprint {{}}; "
        f"this export has {expected}): start again with initial_state", (row, value))
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(other)), [message])
