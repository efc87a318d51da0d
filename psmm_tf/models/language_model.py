"""What every language model of the package shares: windows, carried state and memory, score."""

import keras
import tensorflow as tf
from keras import ops

from psmm_tf.layers import CNNSoftmax, SampledSoftmax
from psmm_tf.models.backbone import LSTMBackbone

SOFTMAX_KINDS = ("full", "sampled", "cnn")


class ScoringMixin:
    """`score()` for any model with the `LanguageModel` call signature and `log_prob`."""

    def score(self, inputs, targets, token_mask=None, state=None, memory=None):
        """Log-probabilities of `targets` given `inputs` and the carried state and memory.

        Args:
            inputs: int `(batch_size, T)`: token `t` is read before `targets[:, t]` is predicted.
            targets: int `(batch_size, T)`.
            token_mask: optional bool `(batch_size, T)`; False for padding after a text's end.
            state, memory: carried from a previous call (None: the start of a text).

        Returns:
            A dict with `log_probs` `(batch_size, T)` (0 where masked), `gate` `(batch_size, T)`
            (the share of the vocabulary softmax; 1 for models without a pointer), and the
            `state` and `memory` to pass to the call for the next piece of the same texts.
        """
        if getattr(self, "_score_function", None) is None:
            self._score_function = tf.function(self._score, reduce_retracing=True)
        inputs = tf.convert_to_tensor(inputs)
        batch_size = tf.shape(inputs)[0]
        if token_mask is None:
            token_mask = tf.ones(tf.shape(inputs), dtype=tf.bool)
        if state is None:
            state = self.zero_state(batch_size)
        if memory is None:
            memory = self.empty_memory(batch_size)
        return self._score_function(inputs, tf.convert_to_tensor(targets), token_mask, state,
                                    memory)

    def _score(self, inputs, targets, token_mask, state, memory):
        outputs = self(inputs, token_mask=token_mask, state=state, memory=memory, training=False)
        token_mask = tf.cast(token_mask, tf.bool)
        # Padded targets may hold any id: score a valid one and zero the result.
        safe_targets = tf.where(token_mask, tf.cast(targets, tf.int32), 0)
        log_probs = tf.where(token_mask, self.log_prob(outputs, safe_targets), 0.0)
        gate = outputs.get("gate", tf.ones_like(log_probs))
        return {"log_probs": log_probs, "gate": gate, "state": outputs["state"],
                "memory": outputs["memory"]}


class LanguageModel(ScoringMixin, keras.Model):
    """Base of the language-model tasks: an `LSTMBackbone`, a vocabulary softmax, and a head.

    A forward pass reads a window of `C + T` tokens: `C` leading context positions (recomputed
    with the current weights, never predicted) and `T` predicted positions. Besides the window
    it takes and returns the carried LSTM state and a memory of the `window_size - 1` most
    recent hidden states with their token ids, so long texts are read in pieces with the same
    result as in one (DESIGN.md section 3). Subclasses add the head on top of the hidden states.

    Args:
        vocab_size: int. Size of the softmax vocabulary.
        embedding_dim, hidden_dim, num_layers: sizes of the backbone.
        window_size: int. `L`: hidden states a position may look back at, its own included.
        input_dropout, hidden_dropout, output_dropout, zoneout: regularisation of the backbone.
        seed: optional int. Seed of the initialisers and random masks.
        softmax: "full", "sampled" (importance-sampled in training, exact in evaluation) or
            "cnn" (output embeddings from a character CNN, sampled in training; call
            `set_vocabulary(words)` after construction). Jozefowicz et al. 2016.
        num_sampled: int. Vocabulary samples per training step ("sampled", "cnn").
        max_word_length: int. Characters per word of the CNN softmax.

    Call arguments:
        token_ids: int `(batch_size, C + T)`.
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
        training: bool.

    Output dropout regularises the vocabulary softmax only: its input is the last layer's
    states after locked dropout, while the head (pointer query, keys, memory) reads the same
    states without it. A locked mask shared by query and keys would inflate every z_i = q.h_i
    in training (each kept unit counts twice in the dot product) and shrink it in evaluation,
    so the gate learnt in training would not be the gate applied in evaluation.

    Returns:
        A dict with `vocab_logits` `(batch_size, T, V)`, `hidden` `(batch_size, T, D)` (the
        states the head reads: without output dropout),
        `key_ids` `(batch_size, K)` (the token at each key, `K = M' + C + T` with `M'` the
        memory's length or 0), `state` (after the first `T` positions: where the next window,
        `T` tokens later, starts), `memory` (the last `M` hidden states, ids and mask), plus the
        head's outputs.
    """

    def __init__(self, vocab_size, embedding_dim=650, hidden_dim=650, num_layers=2,
                 window_size=100, input_dropout=0.5, hidden_dropout=0.5, output_dropout=0.5,
                 zoneout=0.1, seed=None, softmax="full", num_sampled=1024, max_word_length=24,
                 **kwargs):
        super().__init__(**kwargs)
        if softmax not in SOFTMAX_KINDS:
            raise ValueError(f"softmax must be one of {SOFTMAX_KINDS}, got {softmax!r}.")
        if not isinstance(window_size, int) or window_size < 1:
            raise ValueError(f"window_size must be an integer >= 1, got {window_size!r}.")
        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.num_layers = num_layers
        self.window_size = window_size
        self.input_dropout = input_dropout
        self.hidden_dropout = hidden_dropout
        self.output_dropout = output_dropout
        self.zoneout = zoneout
        self.seed = seed
        self.softmax = softmax
        self.num_sampled = num_sampled
        self.max_word_length = max_word_length
        self.backbone = LSTMBackbone(
            vocab_size, embedding_dim, hidden_dim, num_layers, input_dropout=input_dropout,
            hidden_dropout=hidden_dropout, output_dropout=output_dropout, zoneout=zoneout,
            seed=seed, name="backbone",
        )
        self.vocab_head = _vocab_head(softmax, vocab_size, hidden_dim, num_sampled,
                                      max_word_length, seed)
        self.build()

    @property
    def memory_size(self):
        """`M = window_size - 1`: the states older than a position that its window can reach."""
        return self.window_size - 1

    def build(self, input_shape=None):
        self.backbone.build()
        self.vocab_head.build((None, None, self.hidden_dim))
        self.build_head()
        self.built = True

    def build_head(self):
        """Builds the subclass's head on hidden states of width `hidden_dim`."""

    def head_outputs(self, hidden, older_hidden, older_mask):
        """The subclass's extra outputs for queries `hidden` and older keys (or None)."""
        return {}

    def log_prob(self, outputs, targets):
        """Per-target log-probabilities `(batch_size, T)` from this model's `outputs`."""
        raise NotImplementedError

    def distribution(self, outputs):
        """The predictive distribution `(batch_size, T, V)` from this model's `outputs`."""
        raise NotImplementedError

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
        """Gives the softmax the vocabulary's words (needed by the CNN softmax only)."""
        if self.softmax == "cnn":
            self.vocab_head.set_vocabulary(list(words))

    def call(self, token_ids, token_mask=None, state=None, memory=None, context_length=0,
             targets=None, training=False):
        token_ids = ops.cast(token_ids, "int32")
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
            output_dropout=False,
        )
        c = context_length
        query_hidden = hidden[:, c:]
        older = _concat_keys(
            memory, {"hidden": hidden[:, :c], "token_ids": token_ids[:, :c],
                     "mask": token_mask[:, :c]},
        )
        all_keys = _concat_keys(
            memory if memory is not None else self.empty_memory(ops.shape(token_ids)[0]),
            {"hidden": hidden, "token_ids": token_ids, "mask": token_mask},
        )
        new_memory = _last_keys_of_each_row(all_keys, token_mask, self.memory_size)
        outputs = {
            "hidden": query_hidden,
            "key_ids": ops.concatenate([older["token_ids"], token_ids[:, c:]], axis=1),
            "state": new_state,
            "memory": new_memory,
        }
        softmax_input = self.backbone.dropouts[-1](query_hidden, training=training)
        if training and targets is not None and self.softmax != "full":
            outputs["target_vocab_log_prob"] = self.vocab_head.sampled_log_prob(softmax_input,
                                                                                targets)
        else:
            outputs["vocab_logits"] = self.vocab_head(softmax_input)
        has_older = memory is not None or c > 0
        outputs.update(self.head_outputs(
            query_hidden, older["hidden"] if has_older else None,
            older["mask"] if has_older else None,
        ))
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "embedding_dim": self.embedding_dim,
                "hidden_dim": self.hidden_dim,
                "num_layers": self.num_layers,
                "window_size": self.window_size,
                "input_dropout": self.input_dropout,
                "hidden_dropout": self.hidden_dropout,
                "output_dropout": self.output_dropout,
                "zoneout": self.zoneout,
                "seed": self.seed,
                "softmax": self.softmax,
                "num_sampled": self.num_sampled,
                "max_word_length": self.max_word_length,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _vocab_head(softmax, vocab_size, hidden_dim, num_sampled, max_word_length, seed):
    """The output layer: logits `(B, T, V)` from hidden states `(B, T, D)`."""
    initializer = keras.initializers.GlorotUniform(seed=seed)
    if softmax == "sampled":
        return SampledSoftmax(vocab_size, num_sampled=num_sampled, seed=seed,
                              kernel_initializer=initializer, name="vocab_head")
    if softmax == "cnn":
        return CNNSoftmax(vocab_size, hidden_dim, num_sampled=num_sampled,
                          max_word_length=max_word_length, seed=seed, name="vocab_head")
    return keras.layers.Dense(vocab_size, kernel_initializer=initializer, name="vocab_head")


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
    window = tf.shape(token_mask)[1]
    position = tf.range(window)[None, :]
    last = tf.reduce_max(tf.where(token_mask, position, -1), axis=1)  # -1: nothing new
    # Window position j is key size + j; the kept keys end there: indices last + 1 .. last + size.
    index = (last + 1)[:, None] + tf.range(size)[None, :]
    return {name: tf.gather(value, index, batch_dims=1) for name, value in keys.items()}


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
