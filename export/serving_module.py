"""The serving `tf.Module`: a trained language model and its vocabulary, with named signatures.

Signatures (docs/serving.md). `B` (batch) and `T` (time) are dynamic
everywhere, and every input is batch-major (its first dimension is `B`), so TF Serving's
server-side batching, which concatenates requests along the first dimension, can batch every
signature (`batching_parameters.txt` beside `models.config`). Inputs are declared with unknown
rank and checked in the graph (`psmm_tf.export.validation`), so a bad input is an
InvalidArgumentError that names it. Every text is read as training reads a corpus file
(`psmm_tf.export.tokenization`): each line's words plus `<eos>`, and the first token is
predicted after an `<eos>` (the start of a line). Ids follow the same convention: `token_ids`
are the tokens to score; the model reads `[last_id, token_ids[:-1]]`.

- `serving_default` = `score_text`: `texts` string `(B,)` -> `tokens` string `(B, T)` ("" in
  padding), `token_ids` int32 `(B, T)`, `log_probs` float32 `(B, T)` (natural log, 0 in
  padding), `gate` float32 `(B, T)` (the softmax's share; 0 in padding), `num_tokens` int32
  `(B,)`, `log_likelihood` float32 `(B,)` and `perplexity` float32 `(B,)`.
- `score`: `token_ids` int32 `(B, T)` (padding after `lengths` may hold any value), `lengths`
  int32 `(B,)` in `[1, T]` -> the outputs of `score_text` without `tokens` and `token_ids`.
- `score_text_stream`, `score_stream`: the same plus the carried state as inputs and outputs,
  so a long document scored in pieces gives the same numbers as in one piece. State tensors:
  `lstm_state` float32 `(B, num_layers, 2, H)` (`h`, `c` of each layer), `memory_hidden`
  float32 `(B, M, H)`, `memory_ids` int32 `(B, M)`, `memory_mask` bool `(B, M)` (the last
  `M = window_size - 1` hidden states, their tokens, and which exist), `last_id` int32 `(B,)`
  (the last token read; `<eos>` at the start), `vocabulary_fingerprint` int32 `(B,)` (the
  export's `psmm_tf.export.fingerprint` in every row: a state of an export of another
  vocabulary is refused, its ids would name other words).
- `initial_state`: `stream_ids` int32 `(B,)`, one entry per stream to start (any values: only
  their number counts) -> the state of `B` fresh texts, row `i` for entry `i`.
- `predict_next`: `texts` string `(B,)` (contexts; the last line unfinished, "" allowed) and
  `k` int32 `(B,)` in `[1, V]`, each text's number of words (a scalar `k`, for every text, is
  still accepted without server-side batching) -> `top_words` string `(B, K)`, `top_ids` int32
  `(B, K)` (ids `>= V` are context words outside the vocabulary), `top_probs` float32 `(B, K)`
  from the full mixture, `gate` float32 `(B,)`, and `pointer_words` string `(B, min(K, L))`
  with `pointer_probs` float32: the words of the window ranked by the pointer's probability.
  `K = max(k)` over the batch (TF Serving's batch, with server-side batching); row `i`'s
  columns from `k[i]` on are padding: "" words, id -1, probability 0.

A model with character inputs (`input_embedding="chars"`) reads every word of a text from its
spelling, a word outside the vocabulary included (`token_ids` still shows it as `<unk>`'s id,
the id it has in the vocabulary). Its state needs nothing more: the last token a text piece
reads is its `<eos>`, and the ids signatures read the vocabulary's words.

The model may be any `LanguageModel`, an `InputOutputGateLM` (the gated softmax is served), or
a `NeuralCache` over either (Grave et al. 2017; `psmm_tf.export.cache`). With a cache, `log_probs`,
`log_likelihood`, `perplexity` and `top_probs` are those of `(1 - lambda) p_model + lambda
p_cache` (`gate` stays the model's), and the state has three more tensors, in the stream
signatures' inputs and outputs and in `initial_state`: `cache_hidden` float32 `(B, W, H)`,
`cache_ids` int32 `(B, W)`, `cache_mask` bool `(B, W)` (`W` = the cache window).

A request holds at most `max_tokens` tokens (`B` x the longest text's tokens, `DEFAULT_MAX_TOKENS`
unless the export set another), so a huge text is an error naming its input, not a server that
runs out of memory; `initial_state` starts at most `max_tokens` streams too, a batch of
`texts` holds at least one text, and float state inputs must be finite. A signature called with
an input of another dtype fails in TensorFlow before these checks, naming the input by position
only; the clients of `psmm_tf.export.clients` check dtypes by name first (`INPUT_DTYPES`).
"""

import tensorflow as tf

from psmm_tf.compiled import graph_function
from psmm_tf.data import Vocabulary
from psmm_tf.evaluation.neural_cache import CacheSettings, NeuralCache
from psmm_tf.export import CACHE_STATE_NAMES, STATE_NAMES, cache, tokenization, validation
from psmm_tf.export.fingerprint import vocabulary_fingerprint
from psmm_tf.export.next_word import next_word, top_words
from psmm_tf.layers import CharacterEmbedding
from psmm_tf.models.tokenizer import spell_tokens

# Tokens of one request (B x T): the activations grow as B x T x V, and an unbounded request
# can exhaust the server's memory (docs/hostile_inputs.md, row 85).
DEFAULT_MAX_TOKENS = 20_000
_FLOAT_STATES = ("lstm_state", "memory_hidden", "cache_hidden")
_STATE_DTYPES = (tf.float32, tf.float32, tf.int32, tf.bool, tf.int32, tf.int32)
_TEXTS = {"texts": tf.TensorSpec(None, tf.string)}
_IDS = {"token_ids": tf.TensorSpec(None, tf.int32), "lengths": tf.TensorSpec(None, tf.int32)}
_STATE = {name: tf.TensorSpec(None, dtype) for name, dtype in zip(STATE_NAMES, _STATE_DTYPES,
                                                                   strict=True)}
_CACHE_STATE = {name: tf.TensorSpec(None, dtype) for name, dtype in zip(
    CACHE_STATE_NAMES, (tf.float32, tf.int32, tf.bool), strict=True)}
# Rank and meaning of every signature input (checked at run time; see export.validation).
INPUT_RANKS = {
    "texts": (1, "[batch_size]"), "token_ids": (2, "[batch_size, time]"),
    "lengths": (1, "[batch_size]"), "lstm_state": (4, "[batch_size, num_layers, 2, hidden_dim]"),
    "memory_hidden": (3, "[batch_size, memory_size, hidden_dim]"),
    "memory_ids": (2, "[batch_size, memory_size]"), "memory_mask": (2, "[batch_size, memory_size]"),
    "last_id": (1, "[batch_size]"), "vocabulary_fingerprint": (1, "[batch_size]"),
    "k": (1, "[batch_size]"), "stream_ids": (1, "[batch_size]"),
    "cache_hidden": (3, "[batch_size, cache_window, hidden_dim]"),
    "cache_ids": (2, "[batch_size, cache_window]"), "cache_mask": (2, "[batch_size, cache_window]"),
}


def character_input(model):
    """The `CharacterEmbedding` a model (or the model an `InputOutputGateLM` wraps) reads its
    words with, or None."""
    model = getattr(model, "base_model", model)
    embedding = getattr(getattr(model, "backbone", None), "embedding", None)
    return embedding if isinstance(embedding, CharacterEmbedding) else None


def endpoint_specs(with_cache=False):
    """`{endpoint: {input name: TensorSpec}}`; with a cache the stream endpoints take its state."""
    state = {**_STATE, **_CACHE_STATE} if with_cache else _STATE
    return {
        "score_text": _TEXTS,
        "score": _IDS,
        "score_text_stream": {**_TEXTS, **state},
        "score_stream": {**_IDS, **state},
        "initial_state": {"stream_ids": tf.TensorSpec(None, tf.int32)},
        "predict_next": {**_TEXTS, "k": tf.TensorSpec(None, tf.int32)},
    }


def _keyword_signature(method):
    """A `tf.function` taking an endpoint's inputs as keywords (the signature's form)."""

    def signature(**inputs):
        return method(inputs)

    return graph_function(signature, jit_compile=False)


class _Untracked:
    """Holds the Keras model, the scoring function its signatures share and the signatures
    once traced, out of the SavedModel's object graph (only the model's variables go in)."""

    def __init__(self, model):
        self.model = model
        self.scores = None
        self.signatures = {}


class ServingModule(tf.Module):
    """The serving endpoints of a language model and its vocabulary.

    Each endpoint is a `tf.function` attribute taking one dict of named tensors (the form
    `keras.layers.TFSMLayer` calls), and `signatures()` wraps them as keyword signatures.

    Args:
        model: a `psmm_tf.models.LanguageModel` with a full or exact-in-evaluation softmax, an
            `InputOutputGateLM` over one, or a `psmm_tf.evaluation.NeuralCache` over either (its
            window, theta and lambda are served; `cache` holds them).
        vocabulary_file: str. The vocabulary (one token per line, line number = id) with
            `<unk>` and `<eos>`; its size must be the model's `vocab_size`. Its tokens go into
            the graph's lookup tables; the file is kept as an asset (a readable copy).
        max_tokens: int. Most tokens of one request (batch x longest text), in every signature.

    Attributes:
        cache: `psmm_tf.evaluation.CacheSettings` or None.
        vocabulary_fingerprint: int, the vocabulary's `psmm_tf.export.fingerprint` (a constant
            of the graph, in every row of the states it makes and takes).
        state_names: tuple of str, the state tensors of the stream signatures.
    """

    def __init__(self, model, vocabulary_file, name="psmm_serving", max_tokens=DEFAULT_MAX_TOKENS):
        super().__init__(name=name)
        if int(max_tokens) < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}.")
        self.max_tokens = int(max_tokens)
        self.cache = None
        if isinstance(model, NeuralCache):
            self.cache, model = CacheSettings.of(model), model.model
        characters = character_input(model)
        # W of a model with character inputs, else None.
        self.max_word_length = None if characters is None else characters.max_word_length
        self.state_names = STATE_NAMES + (CACHE_STATE_NAMES if self.cache else ())
        self._endpoints = endpoint_specs(with_cache=self.cache is not None)
        vocabulary = Vocabulary.load(vocabulary_file)
        if len(vocabulary) != model.vocab_size:
            raise ValueError(f"The vocabulary {vocabulary_file} has {len(vocabulary)} tokens; "
                             f"the model's vocab_size is {model.vocab_size}.")
        if vocabulary.eos_id is None:
            raise ValueError(f"The vocabulary {vocabulary_file} has no {tokenization.EOS_TOKEN}.")
        self._held = _Untracked(model)
        # The tf.Variables under the Keras variables: tracking the Keras wrappers writes every
        # variable twice into the graph, and a TF1 session (TF Serving) restores only one copy.
        self.model_variables = [getattr(v, "value", v) for v in model.variables]
        self.vocab_size = model.vocab_size
        self.num_layers, self.hidden_dim = model.num_layers, model.hidden_dim
        self.window_size, self.memory_size = model.window_size, model.memory_size
        self.unk_id, self.eos_id = vocabulary.unk_id, vocabulary.eos_id
        self.vocabulary_fingerprint = vocabulary_fingerprint(vocabulary.tokens)
        # The tables hold the vocabulary in the graph itself, not read from the asset file at
        # load: a vocab.txt swapped or edited in an export cannot change what is scored. The
        # asset stays as the export's readable copy (`assets/vocab.txt`).
        self.vocabulary_asset = tf.saved_model.Asset(vocabulary_file)
        tokens = tf.constant(vocabulary.tokens, tf.string)
        ids = tf.range(len(vocabulary), dtype=tf.int64)
        self.word_to_id = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tokens, ids), -1)
        self.id_to_word = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(ids, tokens), "")
        # The four scoring signatures call one function of the model's pass, traced once (for
        # any batch, length and state): the export holds the model's graph once, not four times.
        state_specs = {name: tf.TensorSpec([None] * INPUT_RANKS[name][0], spec.dtype)
                       for name, spec in self._endpoints["score_stream"].items()
                       if name in self.state_names}
        scores_specs = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32),
                        state_specs]
        if self.max_word_length is not None:
            scores_specs.append(tf.TensorSpec([None, None], tf.string))
        self._held.scores = graph_function(self._model_scores, input_signature=scores_specs,
                                           jit_compile=False)
        for endpoint, spec in self._endpoints.items():
            setattr(self, endpoint, graph_function(self._endpoint(endpoint),
                                                  input_signature=[spec], jit_compile=False))

    def signatures(self):
        """The signature map for `tf.saved_model.save` (`serving_default` = `score_text`)."""
        result = self._held.signatures
        for endpoint, spec in self._endpoints.items():
            wrapper = _keyword_signature(getattr(self, "_" + endpoint))
            result[endpoint] = wrapper.get_concrete_function(
                **{name: tf.TensorSpec(None, s.dtype, name=name) for name, s in spec.items()})
        return {**result, "serving_default": result["score_text"]}

    def _endpoint(self, name):
        """The endpoint `name`, taking one dict: a call of its signature once `signatures()` has
        traced them, else its method. `tf.saved_model.save` traces the module's functions again
        in its own context; a call of the traced signature keeps that trace to one operation
        instead of the whole model's graph again."""
        method = getattr(self, "_" + name)

        def endpoint(inputs):
            signature = self._held.signatures.get(name)
            return method(inputs) if signature is None else signature(**inputs)

        endpoint.__name__ = name
        return endpoint

    # Endpoints (dict of named inputs -> dict of named outputs).

    def _score_text(self, inputs):
        outputs, _ = self._text_scores(self._validated(inputs))
        return outputs

    def _score_text_stream(self, inputs):
        outputs, state = self._text_scores(self._validated(inputs))
        return {**outputs, **state}

    def _score(self, inputs):
        inputs = self._validated(inputs)
        outputs, _ = self._scores(inputs["token_ids"], inputs["lengths"], self._state(inputs))
        return outputs

    def _score_stream(self, inputs):
        inputs = self._validated(inputs)
        outputs, state = self._scores(inputs["token_ids"], inputs["lengths"],
                                      self._state(inputs))
        return {**outputs, **state}

    def _initial_state(self, inputs):
        return self._zero_state(tf.shape(self._validated(inputs)["stream_ids"])[0])

    def _predict_next(self, inputs):
        inputs = self._validated(inputs, allow_empty=True)
        texts = inputs["texts"]
        k = tf.broadcast_to(inputs["k"], tf.shape(texts))  # a scalar k: the same for every text
        tokens = tokenization.text_tokens(texts, finish_last_line=False)
        eos = tf.fill([tf.shape(texts)[0], 1], tokenization.EOS_TOKEN)
        words = tf.concat([tf.RaggedTensor.from_tensor(eos), tokens], axis=1)
        lengths = tf.cast(words.row_lengths(), tf.int32)
        words = self._limited("texts", words.to_tensor(""))
        vocab_ids = tf.cast(self.word_to_id.lookup(words), tf.int32)
        mask = tf.sequence_mask(lengths, tf.shape(words)[1])
        model_ids = tf.where(tf.logical_and(mask, vocab_ids >= 0), vocab_ids, self.unk_id)
        outputs = self._held.model(model_ids, token_mask=mask, training=False,
                                   token_chars=self._spelled(words))
        result = next_word(outputs, words, tf.where(mask, vocab_ids, 0), lengths,
                           self.window_size, self.vocab_size, self.cache)
        return top_words(result, k, self.id_to_word, self.vocab_size, self.window_size)

    # Shared parts.

    def _validated(self, inputs, allow_empty=False):
        """The inputs after the staged checks of `psmm_tf.export.validation`, with static ranks."""
        inputs = validation.after_checks(inputs, lambda t: [
            validation.rank_check(name, value, *INPUT_RANKS[name], scalar_ok=name == "k")
            for name, value in t.items()])
        inputs = {name: value if name == "k" else tf.ensure_shape(value, [None] * INPUT_RANKS[
            name][0]) for name, value in inputs.items()}
        if STATE_NAMES[0] in inputs or "lengths" in inputs or "k" in inputs:
            inputs = validation.after_checks(inputs, self._shape_checks)
        return validation.after_checks(inputs, lambda t: self._value_checks(t, allow_empty))

    def _shape_checks(self, inputs):
        batch_size = tf.shape(inputs["texts" if "texts" in inputs else "token_ids"])[0]
        checks = []
        if "k" in inputs:
            k = inputs["k"]
            checks.append(tf.debugging.Assert(
                tf.logical_or(tf.equal(tf.rank(k), 0), tf.equal(tf.size(k), batch_size)),
                ["`k` must have shape [batch_size], one k per text of `texts` (or be a scalar, "
                 "the same k for every text); got shape", tf.shape(k), "for batch_size",
                 batch_size]))
        if "lengths" in inputs:
            checks.append(tf.debugging.assert_equal(
                tf.size(inputs["lengths"]), batch_size,
                message="`lengths` must hold one length per row of `token_ids`."))
        if STATE_NAMES[0] in inputs:
            layers, hidden, size = self.num_layers, self.hidden_dim, self.memory_size
            expected = {
                "lstm_state": ([batch_size, layers, 2, hidden],
                               f"[batch_size, num_layers={layers}, 2, hidden_dim={hidden}]"),
                "memory_hidden": ([batch_size, size, hidden],
                                  f"[batch_size, memory_size={size}, hidden_dim={hidden}]"),
                "memory_ids": ([batch_size, size], f"[batch_size, memory_size={size}]"),
                "memory_mask": ([batch_size, size], f"[batch_size, memory_size={size}]"),
                "last_id": ([batch_size], "[batch_size]"),
                "vocabulary_fingerprint": ([batch_size], "[batch_size]"),
            }
            if self.cache is not None:
                expected.update(cache.state_shapes(batch_size, self.cache.window, hidden))
            for name, (shape, meaning) in expected.items():
                checks.append(validation.shape_check(
                    name, inputs[name], shape,
                    meaning + " (batch_size of the texts or token_ids)"))
        return checks

    def _value_checks(self, inputs, allow_empty):
        checks = []
        if "texts" in inputs:
            # An empty batch reached the model's scan (an error naming no input).
            checks.append(validation.batch_check("texts", inputs["texts"]))
            checks += validation.text_checks("texts", inputs["texts"], allow_empty)
        if "token_ids" in inputs:
            time = tf.shape(inputs["token_ids"])[1]
            checks += validation.lengths_checks("lengths", inputs["lengths"], "token_ids", time)
            mask = tf.sequence_mask(inputs["lengths"], time)
            checks.append(validation.ids_check("token_ids", inputs["token_ids"],
                                               self.vocab_size, mask))
            checks.append(validation.size_check("token_ids", inputs["token_ids"],
                                                self.max_tokens))
        for name in _FLOAT_STATES:
            if name in inputs:
                checks.append(validation.finite_check(name, inputs[name]))
        for name in ("memory_ids", "last_id", "cache_ids"):
            if name in inputs:
                checks.append(validation.ids_check(name, inputs[name], self.vocab_size))
        if "vocabulary_fingerprint" in inputs:
            checks.append(validation.fingerprint_check(
                "vocabulary_fingerprint", inputs["vocabulary_fingerprint"],
                self.vocabulary_fingerprint))
        if "k" in inputs:
            checks.append(validation.range_check("k", inputs["k"], 1, self.vocab_size))
        if "stream_ids" in inputs:
            # No request starts more streams than max_tokens: a few bytes of request become a
            # state of ~100 KB per stream (2**31 rows took a server's whole memory).
            checks.append(tf.debugging.Assert(
                tf.size(inputs["stream_ids"]) <= self.max_tokens,
                [f"`stream_ids` holds too many streams: a request starts at most "
                 f"{self.max_tokens}; got", tf.size(inputs["stream_ids"])]))
        return checks

    def _state(self, inputs):
        """The carried state among the (validated) inputs, or the zero state."""
        if STATE_NAMES[0] not in inputs:
            batch = tf.shape(inputs["texts" if "texts" in inputs else "token_ids"])[0]
            return self._zero_state(batch)
        return {name: inputs[name] for name in self.state_names}

    def _text_scores(self, inputs):
        tokens = tokenization.text_tokens(inputs["texts"], finish_last_line=True)
        lengths = tf.cast(tokens.row_lengths(), tf.int32)
        tokens = self._limited("texts", tokens.to_tensor(""))
        token_ids = tf.cast(self.word_to_id.lookup(tokens), tf.int32)
        token_ids = tf.where(token_ids >= 0, token_ids, self.unk_id)
        outputs, state = self._scores(token_ids, lengths, self._state(inputs), tokens)
        mask = tf.sequence_mask(lengths, tf.shape(token_ids)[1])
        return {"tokens": tokens, "token_ids": tf.where(mask, token_ids, 0), **outputs}, state

    def _limited(self, name, tokens):
        """`tokens` `(B, T)` of input `name`, once they are checked to be at most max_tokens."""
        return validation.after_checks(
            {"tokens": tokens},
            lambda t: [validation.size_check(name, t["tokens"], self.max_tokens)])["tokens"]

    def _spelled(self, tokens):
        """The spelling `(B, T, W)` of string `tokens` `(B, T)` for a model with character
        inputs, else None."""
        if self.max_word_length is None:
            return None
        return spell_tokens(tokens, self.max_word_length)

    def _scores(self, token_ids, lengths, state, tokens=None):
        """Scores of `token_ids` `(B, T)` (valid ids, `lengths` in `[1, T]`) and the new state,
        from the signatures' one traced function (`_model_scores`).

        `tokens` (string `(B, T)`) are the words themselves, which a model with character
        inputs reads (a word outside the vocabulary as itself); without them it reads the
        vocabulary's words of `token_ids` (whatever padding holds is masked).
        """
        if self.max_word_length is None:
            return self._held.scores(token_ids, lengths, state)
        if tokens is None:
            tokens = self.id_to_word.lookup(tf.cast(token_ids, tf.int64))
        return self._held.scores(token_ids, lengths, state, tokens)

    def _model_scores(self, token_ids, lengths, state, words=None):
        """`_scores`, with the `words` of a model with character inputs given."""
        mask = tf.sequence_mask(lengths, tf.shape(token_ids)[1])
        token_ids = tf.where(mask, token_ids, 0)  # padding may hold any value
        inputs = tf.concat([state["last_id"][:, None], token_ids[:, :-1]], axis=1)
        new_state = {}
        input_chars = None
        if self.max_word_length is not None:
            last = self.id_to_word.lookup(tf.cast(state["last_id"], tf.int64))
            input_chars = self._spelled(tf.concat([last[:, None], words[:, :-1]], axis=1))
        layers = tf.unstack(state["lstm_state"], num=self.num_layers, axis=1)
        lstm_state = tuple((layer[:, 0], layer[:, 1]) for layer in layers)
        memory = {"hidden": state["memory_hidden"], "token_ids": state["memory_ids"],
                  "mask": state["memory_mask"]}
        scores, outputs = self._held.model.score_step(inputs, token_ids, mask, lstm_state,
                                                       memory, token_chars=input_chars)
        log_probs = scores["log_probs"]
        if self.cache is not None:
            log_probs, cache_state = cache.cached_log_probs(
                self.cache, log_probs, outputs["hidden"], token_ids, lengths, state)
            new_state.update(cache_state)
        log_probs = tf.where(mask, log_probs, 0.0)
        gate = tf.where(mask, scores["gate"], 0.0)
        log_likelihood = tf.reduce_sum(log_probs, axis=1)
        scores = {"log_probs": log_probs, "gate": gate, "num_tokens": lengths,
                  "log_likelihood": log_likelihood,
                  "perplexity": tf.exp(-log_likelihood / tf.cast(lengths, tf.float32))}
        # The state leaves in the signature's dtype (float32): a 16-bit model's state converts
        # exactly and comes back unchanged (docs/serving.md).
        new_state.update({
            "lstm_state": tf.cast(tf.stack([tf.stack(pair, axis=1) for pair in outputs["state"]],
                                           axis=1), state["lstm_state"].dtype),
            "last_id": tf.gather(token_ids, lengths - 1, batch_dims=1),
            "vocabulary_fingerprint": state["vocabulary_fingerprint"],
        })
        # The model keeps the last M keys of the padded window; a padded row needs the last M
        # keys before its own end, or its next piece would lose real keys to padding slots.
        slots = lengths[:, None] + tf.range(self.memory_size)[None, :]
        for name, new in (("hidden", outputs["hidden"]), ("ids", inputs), ("mask", mask)):
            keys = tf.concat([state["memory_" + name], tf.cast(new, state["memory_" + name].dtype)],
                             axis=1)
            new_state["memory_" + name] = tf.gather(keys, slots, batch_dims=1)
        return scores, new_state

    def _zero_state(self, batch_size):
        lstm = tf.zeros([batch_size, self.num_layers, 2, self.hidden_dim])
        state = {
            "lstm_state": lstm,
            "memory_hidden": tf.zeros([batch_size, self.memory_size, self.hidden_dim]),
            "memory_ids": tf.zeros([batch_size, self.memory_size], tf.int32),
            "memory_mask": tf.zeros([batch_size, self.memory_size], tf.bool),
            "last_id": tf.fill([batch_size], self.eos_id),
            "vocabulary_fingerprint": tf.fill([batch_size], self.vocabulary_fingerprint),
        }
        if self.cache is not None:
            state.update(cache.zero_state(batch_size, self.cache.window, self.hidden_dim))
        return state
