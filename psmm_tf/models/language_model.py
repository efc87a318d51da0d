"""What every language-model task shares: a backbone, windows, carried state and memory, score."""

import keras
import numpy as np
from keras import ops

from psmm_tf.compiled import inference_function, is_traced
from psmm_tf.configs import SOFTMAX_KINDS
from psmm_tf.layers import (
    CNNSoftmax,
    Dense,
    LockedDropout,
    SampledSoftmax,
    mixture_distribution,
    mixture_log_prob,
    mixture_log_prob_from_vocab,
    vocab_log_prob,
)
from psmm_tf.models.backbone import LSTMBackbone
from psmm_tf.models.causal_lm import (
    RecurrentCausalLM,
    drop_stale_compiled_functions,
    note_traced_weights,
)
from psmm_tf.models.inputs import validate_inputs

SCORING_MODES = ("log_probs", "loss", "logits")
# `score` reads longer rows in pieces of this many positions.
SCORE_PIECE_LENGTH = 128


def _check_scoring_mode(scoring_mode, target_ids):
    if scoring_mode not in SCORING_MODES:
        raise ValueError(f"scoring_mode must be one of {SCORING_MODES}, got {scoring_mode!r}.")
    if target_ids is None and scoring_mode != "logits":
        raise ValueError(f"scoring_mode {scoring_mode!r} needs target_ids; only 'logits' "
                         "scores without them.")


def _traced_input(name, value, dtypes, shape):
    """A traced input as a tensor (int ids as int32), its dtype one of `dtypes` (kinds: "int",
    "float", "bool") and its shape `shape` where both are known; ValueError naming it otherwise."""
    value = ops.convert_to_tensor(value)
    dtype = keras.backend.standardize_dtype(value.dtype)
    given = _static_shape(value)
    fits = given is not None and len(given) == len(shape) and given[-1] != 0 and all(
        a is None or b is None or a == b for a, b in zip(given, shape, strict=True))
    if not fits or not any(kind in dtype for kind in dtypes):
        expected = "(batch_size, T)" if shape == (None, None) else f"token_ids' {shape}"
        raise ValueError(f"`{name}` has dtype {dtype} and shape {given}: expected "
                         f"{' or '.join(dtypes)} values of shape {expected}, T >= 1.")
    return ops.cast(value, "int32") if dtypes == ("int",) else value


def _static_shape(value):
    """The static shape of a tensor as a tuple (None for an unknown size), None for an unknown
    rank."""
    try:
        return tuple(value.shape)
    except ValueError:  # TensorFlow: a shape of unknown rank has no length
        return None


class ScoringMixin:
    """`score()` and `score_text()` for any model with the `LanguageModel` call and `log_prob`."""

    def score(self, token_ids, padding_mask=None, scoring_mode="logits",
              layer_intercept_fn=None, target_ids=None):
        """keras-hub's `CausalLM.score`: per-token scores of `token_ids` as one tensor.

        The signature and return of keras-hub's (e.g. `GPT2CausalLM.score`), so a keras-hub
        user's `model.score(ids, mask)` reads the mask as the mask. Each row is read from the
        zero state with an empty memory; `score_with_state` carries them across calls and
        returns the gate too.

        On concrete inputs it checks their values (`validate_inputs`) and calls its own
        compiled function, reading long rows in pieces. Inside a caller's `tf.function` or
        `jax.jit` (traced inputs) it adds the model's pass to the caller's graph, checking
        shapes and dtypes only: an id outside `[0, vocab_size)` is then not caught. Under
        `jax.jit` the weights enter the caller's program as constants of the trace: after
        `fit` or new weights, jit the function again.

        Args:
            token_ids: int `(batch_size, T)`: token `t` is read before `target_ids[:, t]`.
            padding_mask: optional bool `(batch_size, T)`, or numbers all 0 or 1 (all True when
                None); False for padding, whose scores are 0.
            scoring_mode: "logits" (the mixture's log-probabilities of every word, pointer
                included: logits whose softmax is the model's distribution), "loss" (the
                per-token negative log-likelihood of `target_ids`) or "log_probs" (its
                negative).
            layer_intercept_fn: must be None: the recurrent backbone has no per-layer hook
                (keras-hub's transformer models call it on each layer's activations).
            target_ids: int `(batch_size, T)`, needed by "loss" and "log_probs".

        Returns:
            float32 `(batch_size, T, V)` ("logits") or `(batch_size, T)`.

        Raises:
            ValueError: an unknown `scoring_mode`, "loss" without `target_ids`, a
                `layer_intercept_fn`, or inputs `validate_inputs` refuses.
        """
        if layer_intercept_fn is not None:
            raise ValueError("score(layer_intercept_fn=...) is not supported: the recurrent "
                             "backbone has no per-layer activations to intercept; give None.")
        if any(is_traced(x) for x in (token_ids, padding_mask, target_ids) if x is not None):
            return self._score_traced(token_ids, padding_mask, scoring_mode, target_ids)
        result = self.score_with_state(token_ids, target_ids, padding_mask=padding_mask,
                                       scoring_mode=scoring_mode)
        return result[scoring_mode]

    def _score_traced(self, token_ids, padding_mask, scoring_mode, target_ids):
        """`score` inside a caller's traced function: each row from the zero state and an empty
        memory, in one pass added to the caller's graph. Shapes and dtypes are checked; values
        are unknown while tracing, so a mask reads as `padding_mask != 0`, ids under it as 0 (as
        the eager path reads them), and an id outside the vocabulary is not caught."""
        _check_scoring_mode(scoring_mode, target_ids)
        token_ids = _traced_input("token_ids", token_ids, ("int",), (None, None))
        shape = tuple(token_ids.shape)
        mask = (ops.ones_like(token_ids, dtype="bool") if padding_mask is None else ops.cast(
            _traced_input("padding_mask", padding_mask, ("bool", "int", "float"), shape), "bool"))
        token_ids = ops.where(mask, token_ids, 0)
        target_ids = (ops.zeros_like(token_ids) if target_ids is None
                      else _traced_input("target_ids", target_ids, ("int",), shape))
        batch_size = ops.shape(token_ids)[0]
        function = self._score_logits if scoring_mode == "logits" else self._score
        result = function(token_ids, target_ids, mask, self.zero_state(batch_size),
                          self.empty_memory(batch_size))
        if scoring_mode == "loss":
            return -result["log_probs"]
        return result[scoring_mode]

    def score_with_state(self, token_ids, target_ids=None, padding_mask=None, state=None,
                         memory=None, scoring_mode="log_probs", token_chars=None):
        """Scores `target_ids` after `token_ids`, carrying the state and memory (eager entry).

        The package's scoring call (`score` is keras-hub's `CausalLM.score`). The inputs are
        checked (`validate_inputs`) and the model runs compiled on the current backend.

        Args:
            token_ids: int `(batch_size, T)`: token `t` is read before `target_ids[:, t]`.
            target_ids: int `(batch_size, T)`.
            padding_mask: optional bool `(batch_size, T)`; False for padding after a text's end.
            state, memory: carried from a previous call (None: the start of a text).
            scoring_mode: "log_probs" (natural-log probability of each target), "loss" (its
                negative, the per-token cross-entropy) or "logits" (the log-probabilities of
                every word, `(batch_size, T, V)`: the mixture's, pointer included; keras-hub's
                name; `target_ids` may be None).
            token_chars: optional int `(batch_size, T, max_word_length)`: each input word's
                spelling (`psmm_tf.data.spelling.word_characters` rows), for a model with
                character inputs; words the ids hold as `<unk>` are read from it.

        Returns:
            A dict with `log_probs` or `loss` `(batch_size, T)` (0 where masked) or `logits`
            `(batch_size, T, V)`, `gate`
            `(batch_size, T)` (the share of the vocabulary softmax; 1 for models without a
            pointer), and the `state` and `memory` to pass to the call for the next piece of the
            same texts.

        Rows longer than `SCORE_PIECE_LENGTH` tokens are read in pieces of that length, carrying
        the state and memory (the same numbers as one pass), so memory and compile time stay
        bounded whatever the length.
        """
        _check_scoring_mode(scoring_mode, target_ids)
        if target_ids is None:
            target_ids = np.zeros(np.shape(token_ids), np.int32)
        checked = validate_inputs(self, token_ids, target_ids=target_ids,
                                  padding_mask=padding_mask, state=state, memory=memory,
                                  token_chars=token_chars)
        batch_size = checked["token_ids"].shape[0]
        if checked["state"] is None:
            checked["state"] = self.zero_state(batch_size)
        if checked["memory"] is None:
            checked["memory"] = self.empty_memory(batch_size)
        drop_stale_compiled_functions(self)
        functions = self.__dict__.setdefault("_scoring_functions", {})
        full = scoring_mode == "logits"
        if functions.get(full) is None:
            functions[full] = inference_function(
                self, self._score_logits if full else self._score)
        result = self._score_in_pieces(checked, functions[full])
        note_traced_weights(self)
        if scoring_mode == "loss":
            result["loss"] = -result.pop("log_probs")
        return result

    def _score_in_pieces(self, checked, function):
        """`function` over pieces of at most `SCORE_PIECE_LENGTH` positions."""
        inputs = [checked[k] for k in ("token_ids", "target_ids", "padding_mask")]
        chars = checked["token_chars"]
        state, memory = checked["state"], checked["memory"]
        steps = inputs[0].shape[1]
        if steps <= SCORE_PIECE_LENGTH:
            return function(*inputs, state, memory, chars)
        # Padded to whole pieces (one compiled length); padding leaves state and memory alone.
        padded = -(-steps // SCORE_PIECE_LENGTH) * SCORE_PIECE_LENGTH
        inputs = [np.pad(x, ((0, 0), (0, padded - steps))) for x in inputs]
        if chars is not None:
            chars = np.pad(chars, ((0, 0), (0, padded - steps), (0, 0)))
        pieces = []
        for start in range(0, padded, SCORE_PIECE_LENGTH):
            piece = [x[:, start:start + SCORE_PIECE_LENGTH] for x in inputs]
            pieces.append(function(*piece, state, memory, None if chars is None
                                   else chars[:, start:start + SCORE_PIECE_LENGTH]))
            state, memory = pieces[-1]["state"], pieces[-1]["memory"]
        key = "logits" if "logits" in pieces[0] else "log_probs"
        return {key: ops.concatenate([p[key] for p in pieces], 1)[:, :steps],
                "gate": ops.concatenate([p["gate"] for p in pieces], 1)[:, :steps],
                "state": state, "memory": memory}

    def score_text(self, texts):
        """Scores whole texts with the model's `preprocessor`, as the SavedModel's `score_text`.

        Args:
            texts: a str or a list of str, none empty (as the SavedModel's `score_text`).
                Each is read as a corpus file: each line's words followed by `<eos>`, the
                first word predicted after an `<eos>`.

        Returns:
            A dict of NumPy arrays: `log_probs`, `gate` `(batch_size, T)` (0 in padding),
            `num_tokens`, `log_likelihood`, `perplexity` `(batch_size,)`, and `tokens` (a list
            of each text's tokens).
        """
        if getattr(self, "preprocessor", None) is None:
            raise ValueError("score_text needs a preprocessor: build the model with "
                             "preprocessor=LanguageModelPreprocessor(vocabulary).")
        listed = [texts] if isinstance(texts, str) else (
            texts if isinstance(texts, (list, tuple)) else [])  # others: refused below
        empty = [i for i, text in enumerate(listed) if isinstance(text, str) and not text]
        if empty:  # the SavedModel's words (export/validation.py)
            raise ValueError(f"`texts` holds an empty string (nothing to score), at indices: "
                             f"{empty}")
        spelled = getattr(self, "input_embedding", "ids") == "chars"
        batch = self.preprocessor.score_inputs(
            texts, max_word_length=self.backbone.max_word_length if spelled else None)
        scores = self.score_with_state(batch["token_ids"], batch["target_ids"],
                            padding_mask=batch["padding_mask"],
                            token_chars=batch.get("token_chars"))
        mask = batch["padding_mask"]
        log_probs = ops.convert_to_numpy(scores["log_probs"]).astype("float32")
        gate = ops.convert_to_numpy(scores["gate"]).astype("float32") * mask
        num_tokens = mask.sum(axis=1).astype("int32")
        log_likelihood = log_probs.sum(axis=1)
        return {"tokens": batch["tokens"], "log_probs": log_probs, "gate": gate,
                "num_tokens": num_tokens, "log_likelihood": log_likelihood,
                "perplexity": _perplexity(log_likelihood, num_tokens)}

    def score_step(self, token_ids, target_ids, token_mask, state, memory, target_mask=None,
                   token_chars=None):
        """One scored forward pass: the package's one scoring routine (traceable, unchecked).

        `score`, the evaluator, the neural cache, the pointer diagnostics and the serving
        signatures all score through it.

        Args:
            token_ids, target_ids: int `(batch_size, T)`. token_mask: bool `(batch_size, T)`,
                the real input tokens. state, memory: the carried state and memory.
            target_mask: optional bool `(batch_size, T)`, the targets to score (default
                `token_mask`); the others may hold any id.
            token_chars: optional int `(batch_size, T, max_word_length)`: the spelling of each
                input token, for a model with character inputs (see `LanguageModel`).

        Returns:
            `(scores, outputs)`: `scores` holds float32 `(batch_size, T)` `log_probs` (0 where
            `target_mask` is False) and `gate` (the vocabulary softmax's share; 1 without a
            pointer); `outputs` is the model call's dict (`state`, `memory`, `hidden`, ...).
        """
        target_mask = token_mask if target_mask is None else target_mask
        outputs = self(token_ids, token_mask=token_mask, state=state, memory=memory,
                       training=False, token_chars=token_chars)
        safe_targets = ops.where(target_mask, target_ids, 0)
        log_probs = ops.cast(self.log_prob(outputs, safe_targets), "float32")
        log_probs = ops.where(target_mask, log_probs, 0.0)
        gate = (ops.cast(outputs["gate"], "float32") if "gate" in outputs
                else ops.ones_like(log_probs))
        return {"log_probs": log_probs, "gate": gate}, outputs

    def _score(self, token_ids, target_ids, padding_mask, state, memory, token_chars=None):
        scores, outputs = self.score_step(token_ids, target_ids, padding_mask, state, memory,
                                          token_chars=token_chars)
        return {**scores, "state": outputs["state"], "memory": outputs["memory"]}

    def _score_logits(self, token_ids, target_ids, padding_mask, state, memory,
                      token_chars=None):
        del target_ids  # the whole distribution is returned
        outputs = self(token_ids, token_mask=padding_mask, state=state, memory=memory,
                       training=False, token_chars=token_chars)
        logits = ops.where(padding_mask[:, :, None], self.log_distribution(outputs), 0.0)
        gate = outputs.get("gate", ops.ones(ops.shape(token_ids), "float32"))
        return {"logits": logits, "gate": gate, "state": outputs["state"],
                "memory": outputs["memory"]}


class LanguageModel(ScoringMixin, RecurrentCausalLM):
    """Base of the language-model tasks: a backbone, a vocabulary softmax, optionally a pointer.

    A keras-hub `CausalLM` (`RecurrentCausalLM`): `compile`/`fit` on ids or strings,
    `predict`, `generate` with keras-hub's samplers, `from_preset`/`save_to_preset`. The
    task is given an `LSTMBackbone` and owns its head: the output
    dropout, the vocabulary softmax and (PSMM, pointer softmax) the pointer. A forward pass reads
    a window of `C + T` tokens: `C` leading context positions (recomputed with the current
    weights, never predicted) and `T` predicted positions. Besides the window it takes and
    returns the carried LSTM state and a memory of the `window_size - 1` most recent hidden
    states with their token ids, so long texts are read in pieces with the same result as in one
    (docs/architecture.md). With a pointer, `p(y) = g p_vocab(y) + sum_{i: x_i = y} a_i` (paper
    eq. 3); without one, `p = p_vocab`.

    Args:
        backbone: an `LSTMBackbone` (or its serialised config).
        window_size: int. `L`: hidden states a position may look back at, its own included.
        output_dropout: float in [0, 1). Locked dropout on the vocabulary softmax's input.
        softmax: "full", "sampled" (importance-sampled in training, exact in evaluation) or
            "cnn" (output embeddings from a character CNN, sampled in training; call
            `set_vocabulary(words)` after construction). Jozefowicz et al. 2016.
        num_sampled: int. Vocabulary samples per training step ("sampled", "cnn").
        max_word_length: int. Characters per word of the CNN softmax.
        seed: optional int. Seed of the head's initialisers and dropout masks.
        preprocessor: optional `LanguageModelPreprocessor` (strings -> ids, saved in the `.keras`
            file), needed by `score_text`.
        pointer: optional layer called as `pointer(hidden, memory=, memory_mask=)` returning
            `(attention, gate)` (`PointerSentinel`, `PointerSoftmax`); given by the subclasses.
        compile: bool. Compile with the defaults of `RecurrentCausalLM.compile` (keras-hub's
            convention; psmm-train builds its models uncompiled).
        head_dtype: optional Keras dtype policy of the vocabulary head, where it differs from
            the backbone's: the quantized policy `quantize` gives it (`int8_from_float32`, ...),
            kept in the config so that a saved quantized model loads as it was.

    Call arguments:
        token_ids: int `(batch_size, C + T)`, or a dict with `token_ids` and `padding_mask`
            (keras-hub's inputs; the mask is the `token_mask`).
        token_mask: optional bool `(batch_size, C + T)`; False marks positions that do not exist
            (before the start of the text, padding after its end).
        state: optional tuple of `num_layers` pairs `(h, c)`; zeros when None.
        memory: optional dict with `hidden` `(batch_size, M, D)`, `token_ids` `(batch_size, M)`
            and `mask` `(batch_size, M)`, `M = window_size - 1`, e.g. the previous call's
            `memory`. Its hidden states are constants (no gradient flows into them).
        context_length: static int `C >= 0`.
        targets: optional int `(batch_size, T)`. With a sampled or CNN softmax in training, the
            output holds `target_vocab_log_prob` (a sampled estimate, `(batch_size, T)`) instead
            of `vocab_logits`, so no `(batch_size, T, V)` tensor is formed.
        token_chars: optional int `(batch_size, C + T, max_word_length)`: each input word's
            spelling, for a backbone with `input_embedding="chars"` (a word outside the
            vocabulary, held as `<unk>` in `token_ids`, is read from its characters).
        key_ids: optional int `(batch_size, C + T)`: the ids the pointer's keys (and the
            returned memory) hold for these positions, default `token_ids`; ids `>= V` name
            words outside the vocabulary that `token_ids` holds as `<unk>` (`generate`'s open
            vocabulary: `distribution(outputs, extra_ids)` gives them their mass).
        training: bool.

    Output dropout regularises the vocabulary softmax only: its input is the last layer's
    states after locked dropout, while the pointer (query, keys, memory) reads the same states
    without it. A locked mask shared by query and keys would inflate every z_i = q.h_i in
    training (each kept unit counts twice in the dot product) and shrink it in evaluation, so
    the gate learnt in training would not be the gate applied in evaluation.

    Returns:
        A dict with `vocab_logits` `(batch_size, T, V)`, `hidden` `(batch_size, T, D)` (the
        states the pointer reads: without output dropout), `key_ids` `(batch_size, K)` (the token
        at each key, `K = M' + C + T` with `M'` the memory's length or 0), `state` (after the
        first `T` positions: where the next window, `T` tokens later, starts), `memory` (the last
        `M` hidden states, ids and mask), and with a pointer `attention` `(batch_size, T, K)` and
        `gate` `(batch_size, T)`.
    """

    # The registry's declarations (psmm_tf/models/registry.py), set by each registered task.
    kind = None
    hyperparameters = ()
    compared_arguments = ()
    # Whether the task mixes its softmax with a pointer (given as `pointer`).
    has_pointer = False

    @classmethod
    def head_parameter_count(cls, model_config):
        """Trainable weights the task adds to the LSTM language model of `model_config`."""
        del model_config
        return 0

    def __init__(self, backbone, window_size=100, output_dropout=0.5, softmax="full",
                 num_sampled=1024, max_word_length=24, seed=None, preprocessor=None,
                 pointer=None, compile=True, head_dtype=None, **kwargs):
        super().__init__(compile=False, **kwargs)
        backbone = as_backbone(backbone)
        if isinstance(preprocessor, dict):
            preprocessor = keras.saving.deserialize_keras_object(preprocessor)
        if softmax not in SOFTMAX_KINDS:
            raise ValueError(f"softmax must be one of {SOFTMAX_KINDS}, got {softmax!r}.")
        if not isinstance(window_size, int) or isinstance(window_size, bool) or window_size < 1:
            raise ValueError(f"window_size must be an integer >= 1, got {window_size!r}.")
        self.backbone = backbone
        self.window_size = window_size
        self.output_dropout = output_dropout
        self.softmax = softmax
        self.num_sampled = num_sampled
        self.max_word_length = max_word_length
        self.seed = seed
        self.preprocessor = preprocessor
        # The head computes under the backbone's policy (keras-hub's tasks take theirs).
        policy = backbone.dtype_policy
        self.dtype_policy = policy
        self.softmax_dropout = LockedDropout(
            output_dropout, seed=None if seed is None else seed + 40 + backbone.num_layers,
            name="output_dropout", dtype=policy)
        # A quantized head (`quantize`) keeps its own policy, `int8_from_float32`, ...
        self.vocab_head = _vocab_head(softmax, backbone.vocab_size, backbone.hidden_dim,
                                      num_sampled, max_word_length, seed, backbone.init_scale,
                                      dtype=policy if head_dtype is None else head_dtype)
        if (pointer is not None) != self.has_pointer:
            raise TypeError(f"{type(self).__name__} declares has_pointer={self.has_pointer} "
                            f"but was given pointer={pointer!r}.")
        if pointer is not None:
            pointer.dtype_policy = policy  # a layer without sub-layers: set before it builds
            self.pointer = pointer
        self.build()
        if compile:
            self.compile()

    # The backbone's sizes are the task's.
    vocab_size = property(lambda self: self.backbone.vocab_size)
    embedding_dim = property(lambda self: self.backbone.embedding_dim)
    hidden_dim = property(lambda self: self.backbone.hidden_dim)
    num_layers = property(lambda self: self.backbone.num_layers)
    input_embedding = property(lambda self: self.backbone.input_embedding)

    @property
    def memory_size(self):
        """`M = window_size - 1`: the states older than a position that its window can reach."""
        return self.window_size - 1

    def build(self, input_shape=None):
        # A backbone deserialised from a config arrives built.
        if not self.backbone.built:
            self.backbone.build()
        head_shape = (None, None, self.hidden_dim)
        for layer in (self.softmax_dropout, self.vocab_head) + (
                (self.pointer,) if self.has_pointer else ()):
            if not layer.built:
                layer.build(head_shape)
        self.built = True

    def zero_state(self, batch_size):
        """The all-zero LSTM state for `batch_size` streams."""
        return self.backbone.zero_state(batch_size)

    def empty_memory(self, batch_size):
        """A memory with every slot empty (the start of a text)."""
        size = self.memory_size
        return {
            "hidden": ops.zeros((batch_size, size, self.hidden_dim), dtype=self.compute_dtype),
            "token_ids": ops.zeros((batch_size, size), dtype="int32"),
            "mask": ops.zeros((batch_size, size), dtype="bool"),
        }

    def set_vocabulary(self, words):
        """Gives the model the vocabulary's words (V strings, index = id), which the CNN
        softmax and the character input embedding spell; a no-op for the others."""
        if self.softmax == "cnn":
            self.vocab_head.set_vocabulary(list(words))
        self.backbone.set_vocabulary(words)
        self.reset_compiled_functions()

    def quantized_layers(self):
        """The layers `quantize` takes: the input embedding of ids (a Keras `Embedding`) and
        the full softmax's head (Keras' `Dense` maths). The LSTM, the pointer, a character CNN
        and the sampled and CNN softmaxes have no quantized form and keep their policy."""
        layers = []
        if type(self.backbone.embedding) is keras.layers.Embedding:
            layers.append(self.backbone.embedding)
        if type(self.vocab_head) is Dense:
            layers.append(self.vocab_head)
        return layers

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """keras-hub's `quantize` on `quantized_layers()` (of those, the ones `filters` keeps);
        a quantized model saves and loads as it is (the head's policy is `head_dtype`).

        Raises:
            ValueError: the model has no layer with a quantized form (character inputs with a
                sampled or CNN softmax).
        """
        from keras.src.quantizers.utils import should_quantize_layer

        kwargs.pop("type_check", None)  # psmm_tf's Dense is Keras' own maths: no type check
        layers = self.quantized_layers()
        if not layers:
            raise ValueError(f"quantize({mode!r}): this {type(self).__name__} has no layer with "
                             f"a quantized form (the input embedding of ids and the full "
                             f"softmax's head have one; its are {self.input_embedding!r} and "
                             f"{self.softmax!r}).")
        chosen = [id(layer) for layer in layers]
        super().quantize(
            mode, config=config, type_check=False, **kwargs,
            filters=lambda layer: id(layer) in chosen and should_quantize_layer(layer, filters))

    def call(self, token_ids, token_mask=None, state=None, memory=None, context_length=0,
             targets=None, training=False, token_chars=None, key_ids=None):
        if isinstance(token_ids, dict):  # keras-hub's inputs
            if token_mask is None:
                token_mask = token_ids.get("padding_mask")
            token_ids = token_ids["token_ids"]
        token_ids = ops.cast(token_ids, "int32")
        try:
            rank = len(token_ids.shape)
        except (TypeError, ValueError):  # a TensorFlow tensor of unknown rank
            rank = None
        if rank != 2:  # e.g. fit on a dataset of texts that was not batched
            raise ValueError(
                f"token_ids must be (batch_size, T), got "
                f"{'a tensor of unknown rank' if rank is None else f'rank {rank}'}: a batch of "
                f"texts or ids is expected (a tf.data dataset of texts is batched first: "
                f"dataset.batch(n)).")
        key_ids = token_ids if key_ids is None else ops.cast(key_ids, "int32")
        window = ops.shape(token_ids)[1]
        if not isinstance(context_length, int) or context_length < 0:
            raise ValueError(f"context_length must be a static int >= 0, got {context_length!r}.")
        if isinstance(window, int) and window <= context_length:
            raise ValueError(
                f"The window ({window} tokens) must be longer than context_length "
                f"({context_length}): at least one position must be predicted."
            )
        if token_mask is None:
            token_mask = ops.ones(ops.shape(token_ids), dtype="bool")
        token_mask = ops.cast(token_mask, "bool")
        num_predicted = window - context_length
        hidden, new_state = self.backbone(
            token_ids, initial_state=state, token_mask=token_mask, training=training,
            state_index=num_predicted - 1 if isinstance(num_predicted, int) else None,
            token_chars=token_chars,
        )
        c = context_length
        query_hidden = hidden[:, c:]
        older = _concat_keys(
            memory, {"hidden": hidden[:, :c], "token_ids": key_ids[:, :c],
                     "mask": token_mask[:, :c]},
        )
        all_keys = _concat_keys(
            memory if memory is not None else self.empty_memory(ops.shape(token_ids)[0]),
            {"hidden": hidden, "token_ids": key_ids, "mask": token_mask},
        )
        outputs = {
            "hidden": query_hidden,
            "key_ids": ops.concatenate([older["token_ids"], key_ids[:, c:]], axis=1),
            "state": new_state,
            "memory": _last_keys_of_each_row(all_keys, token_mask, self.memory_size),
        }
        softmax_input = self.softmax_dropout(query_hidden, training=training)
        if training and targets is not None and self.softmax != "full":
            outputs["target_vocab_log_prob"] = self.vocab_head.sampled_log_prob(softmax_input,
                                                                                targets)
        else:
            outputs["vocab_logits"] = self.vocab_head(softmax_input)
        if self.has_pointer:
            has_older = memory is not None or c > 0
            outputs["attention"], outputs["gate"] = self.pointer(
                query_hidden, memory=older["hidden"] if has_older else None,
                memory_mask=older["mask"] if has_older else None)
        return outputs

    def log_prob(self, outputs, targets):
        """Per-target log-probabilities `(batch_size, T)` from this model's `outputs`."""
        if "target_vocab_log_prob" in outputs:  # sampled softmax in training
            vocab = outputs["target_vocab_log_prob"]
            if not self.has_pointer:
                return vocab
            return mixture_log_prob_from_vocab(vocab, outputs["attention"], outputs["gate"],
                                               outputs["key_ids"], targets)
        if not self.has_pointer:
            return vocab_log_prob(outputs["vocab_logits"], targets)
        return mixture_log_prob(outputs["vocab_logits"], outputs["attention"], outputs["gate"],
                                outputs["key_ids"], targets)

    def log_distribution(self, outputs, extra_ids=0):
        """The predictive log-probabilities `(batch_size, T, V + extra_ids)` (float32; the
        mixture's, with a pointer), floored at the smallest normal float32 (about -87.3)."""
        return ops.log(ops.maximum(self.distribution(outputs, extra_ids), 1.1754944e-38))

    def distribution(self, outputs, extra_ids=0):
        """The predictive distribution `(batch_size, T, V + extra_ids)` from `outputs`.

        `extra_ids` (static int >= 0) widens it past the vocabulary, for keys whose `key_ids`
        are `>= V` (words outside the vocabulary): the softmax gives them nothing, the pointer
        its attention (`psmm_tf.export.next_word` does the same for `predict_next`).
        """
        logits = ops.cast(outputs["vocab_logits"], "float32")
        if extra_ids:
            logits = ops.pad(logits, [[0, 0], [0, 0], [0, extra_ids]],
                             constant_values=_PAD_LOGIT)
        if not self.has_pointer:
            return ops.softmax(logits, axis=-1)
        return mixture_distribution(logits, outputs["attention"], outputs["gate"],
                                    outputs["key_ids"])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "backbone": keras.saving.serialize_keras_object(self.backbone),
                "window_size": self.window_size,
                "output_dropout": self.output_dropout,
                "softmax": self.softmax,
                "num_sampled": self.num_sampled,
                "max_word_length": self.max_word_length,
                "seed": self.seed,
                "preprocessor": (None if self.preprocessor is None else
                                 keras.saving.serialize_keras_object(self.preprocessor)),
            }
        )
        if self.vocab_head.quantization_mode is not None:
            config["head_dtype"] = keras.dtype_policies.serialize(self.vocab_head.dtype_policy)
        return config

    @classmethod
    def from_config(cls, config):
        # Uncompiled: a `.keras` file's compile config, if any, is applied by the loader, and
        # a model saved uncompiled (psmm-train's) is compiled with the defaults when first fit,
        # evaluated or asked to generate (`RecurrentCausalLM`).
        return cls(**dict(config, compile=False))


# The logit of an id past the vocabulary (an `extra_ids` column): probability 0 in the softmax.
_PAD_LOGIT = -1e30


def _perplexity(log_likelihood, num_tokens):
    with np.errstate(over="ignore"):
        return np.exp(-log_likelihood / np.maximum(num_tokens, 1)).astype("float32")


def as_backbone(backbone):
    """`backbone` itself, or the `LSTMBackbone` its serialised config describes.

    Raises:
        TypeError: it is neither.
    """
    if isinstance(backbone, dict):
        backbone = keras.saving.deserialize_keras_object(backbone)
    if not isinstance(backbone, LSTMBackbone):
        raise TypeError(f"backbone must be an LSTMBackbone, got {type(backbone).__name__}.")
    return backbone


def _vocab_head(softmax, vocab_size, hidden_dim, num_sampled, max_word_length, seed,
                init_scale=None, dtype=None):
    """The output layer: logits `(B, T, V)` from hidden states `(B, T, D)`; its kernel Glorot,
    or uniform in `[-init_scale, init_scale]` (the backbone's `init_scale`)."""
    # The head takes a seed of its own: the embedding's (the same uniform draw, rescaled) would
    # start the head as a reshaped copy of the embedding.
    head_seed = None if seed is None else seed + 90
    initializer = (keras.initializers.GlorotUniform(seed=head_seed) if init_scale is None
                   else keras.initializers.RandomUniform(-init_scale, init_scale, seed=head_seed))
    if softmax == "sampled":
        return SampledSoftmax(vocab_size, num_sampled=num_sampled, seed=seed,
                              kernel_initializer=initializer, name="vocab_head", dtype=dtype)
    if softmax == "cnn":
        return CNNSoftmax(vocab_size, hidden_dim, num_sampled=num_sampled,
                          max_word_length=max_word_length, seed=seed, name="vocab_head",
                          dtype=dtype)
    return Dense(vocab_size, kernel_initializer=initializer, name="vocab_head", dtype=dtype)


def _last_keys_of_each_row(keys, token_mask, size):
    """Each row's `size` most recent keys, ending at its own last existing position.

    Args:
        keys: dict of hidden `(B, size + S, D)`, token_ids and mask `(B, size + S)`: the
            carried memory followed by the window.
        token_mask: bool `(B, S)`, the window's positions that exist.
        size: int M.

    Returns:
        The memory for the row's next piece of text: a row padded after its end keeps the keys
        before the padding, and a row with no position in this window keeps its memory.
    """
    window = ops.shape(token_mask)[1]
    position = ops.arange(window, dtype="int32")[None, :]
    last = ops.max(ops.where(token_mask, position, -1), axis=1)  # -1: nothing new
    # Window position j is key size + j; the kept keys end there: indices last + 1 .. last + size.
    index = (last + 1)[:, None] + ops.arange(size, dtype="int32")[None, :]
    hidden = keys["hidden"]
    # The hidden states as whole rows of one (B (size + S), D) matrix: a gather of B size rows,
    # where take_along_axis would gather B size D single numbers.
    batch_size, length, dim = ops.shape(hidden)[0], ops.shape(hidden)[1], ops.shape(hidden)[2]
    rows = index + (ops.arange(batch_size, dtype="int32") * length)[:, None]
    kept_hidden = ops.reshape(ops.take(ops.reshape(hidden, (-1, dim)), ops.reshape(rows, (-1,)),
                                       axis=0), (batch_size, size, dim))
    return {
        "hidden": kept_hidden,
        "token_ids": ops.take_along_axis(keys["token_ids"], index, axis=1),
        "mask": ops.take_along_axis(keys["mask"], index, axis=1),
    }


def _concat_keys(first, second):
    """Concatenates two key sets (dicts of hidden, token_ids, mask) along time; first may be None.

    The first set's hidden states come from an earlier call and are constants.
    """
    if first is None:
        return second
    return {
        "hidden": ops.concatenate(
            [ops.cast(ops.stop_gradient(first["hidden"]), second["hidden"].dtype),
             second["hidden"]], axis=1),
        "token_ids": ops.concatenate(
            [ops.cast(first["token_ids"], "int32"), second["token_ids"]], axis=1),
        "mask": ops.concatenate([ops.cast(first["mask"], "bool"), second["mask"]], axis=1),
    }
