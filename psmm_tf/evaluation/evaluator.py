"""Exact evaluation: perplexity with every target seeing its full history (docs/architecture.md).

The split is read in non-overlapping windows of `length` tokens (C = 0) with the LSTM state and
the pointer memory of the last L - 1 hidden states carried from window to window, so target t
is scored with the L previous tokens in the pointer's window (fewer only at the start of the
text) and the whole text in the LSTM state: in float32 the result does not depend on `length`
(under a 16-bit policy the carried cell state is rounded to 16 bits at each window's end, a
relative difference of about 1e-5 in perplexity between lengths). With
`batch_size` B > 1 the split is cut into B streams and the first target of each stream after the
first starts without history (slightly pessimistic); B = 1 is exact.

Perplexity = exp(sum of -log p(target) / number of targets).
"""

import dataclasses
import math

import numpy as np
from keras import ops

from psmm_tf.compiled import inference_function
from psmm_tf.data.windows import (
    check_int,
    evaluation_stream_length,
    evaluation_window_shape,
    iter_evaluation_windows,
)


@dataclasses.dataclass
class EvaluationResult:
    """Scores of one evaluation.

    Attributes:
        perplexity: float. exp(nll_sum / num_targets).
        nll_sum: float. Sum of -log p over the targets.
        num_targets: int. Number of targets scored (len(ids) - 1).
        mean_gate: float. Mean sentinel gate g (1 for models without a pointer).
        nll: float64 `(num_targets,)` or None. -log p of target j = ids[j + 1], text order.
        gate: float32 `(num_targets,)` or None. The gate at each target.
        attention: dict target index j -> dict with `key_ids` int `(k,)` (the k <= L tokens
            of the pointer's window, oldest first, ids[j - k + 1 .. j]) and `weights` float
            `(k,)` (their attention), for the requested positions.
    """

    perplexity: float
    nll_sum: float
    num_targets: int
    mean_gate: float
    nll: np.ndarray | None = None
    gate: np.ndarray | None = None
    attention: dict = dataclasses.field(default_factory=dict)


class Evaluator:
    """Scores token-id streams with a trained `LanguageModel`, state and memory carried.

    Args:
        model: a `LanguageModel` (PSMM, LSTM, ...).
        batch_size: int >= 1. Streams B read side by side (1: exact); a text of fewer targets
            is read in one stream per target.
        length: int >= 1. Window length T of a step (speed; in float32 results do not depend on
            it, under a 16-bit policy to about 1e-5: the module's docstring), at most a stream's
            length.

    Raises:
        ValueError: `batch_size` or `length` is not an int >= 1.
        jit_compile: bool. XLA-compile the step on TensorFlow (on JAX it always is).

    It runs on the TensorFlow and JAX backends (JAX without TensorFlow installed too): the
    windows are NumPy arrays, the step is compiled by `psmm_tf.compiled.inference_function`
    (`tf.function` or `jax.jit`).

    Example:
    ```python
    import numpy as np
    from psmm_tf.evaluation import Evaluator
    from psmm_tf.models import LSTMBackbone, PointerSentinelLM

    backbone = LSTMBackbone(vocab_size=50, embedding_dim=16, hidden_dim=16, num_layers=2)
    model = PointerSentinelLM(backbone, window_size=10)
    ids = np.random.default_rng(0).integers(0, 50, size=300)
    result = Evaluator(model, batch_size=1, length=50).evaluate(ids)
    print(result.perplexity, result.num_targets)  # ~50 untrained; 299 targets
    ```
    """

    def __init__(self, model, batch_size=1, length=100, jit_compile=False):
        self.model = model
        self.batch_size = check_int(batch_size, "batch_size", 1)
        self.length = check_int(length, "length", 1)
        self._step = inference_function(model, self._scores, jit_compile=jit_compile)

    def evaluate(self, ids, max_tokens=None, collect=False, attention_positions=(),
                 spelling=None):
        """Evaluates the model on `ids`.

        Args:
            ids: int `(num_tokens,)`. The split, at least two tokens.
            max_tokens: optional int. Evaluate on the first `max_tokens` tokens only.
            collect: bool. Keep per-target `nll` and `gate` arrays.
            attention_positions: iterable of target indices j (predicting ids[j + 1]) whose
                pointer attention over the window is kept (models with a pointer only).
            spelling: optional `psmm_tf.data.spelling.Spelling` of `ids`, for a model with
                character inputs: words outside the vocabulary are read from their characters.

        Returns:
            An `EvaluationResult`.
        """
        ids = np.asarray(ids)
        if max_tokens is not None:
            ids = ids[:max_tokens]
            spelling = None if spelling is None else spelling[:max_tokens]
        num_targets = len(ids) - 1
        wanted = {int(p) for p in attention_positions}
        # At most one stream per target, windows at most a stream long (the windows' shape).
        batch_size, length = evaluation_window_shape(len(ids), self.batch_size, self.length)
        stream = evaluation_stream_length(len(ids), batch_size)  # the last may be shorter
        model = self.model
        state = model.zero_state(batch_size)
        memory = model.empty_memory(batch_size)
        nll_sum, gate_sum = 0.0, 0.0
        nll = np.zeros(num_targets) if collect else None
        gate = np.zeros(num_targets, np.float32) if collect else None
        attention = {}
        windows = iter_evaluation_windows(ids, batch_size=batch_size, length=length,
                                          spelling=spelling)
        for k, batch in enumerate(windows):
            log_probs, gates, state, memory, extra = self._step(batch, state, memory)
            weights = batch["target_weights"]
            log_probs, gates = ops.convert_to_numpy(log_probs), ops.convert_to_numpy(gates)
            nll_sum -= float(np.sum(log_probs.astype(np.float64) * weights))
            gate_sum += float(np.sum(gates * weights))
            # Target index of row b, column t: b * stream + k * length + t.
            index = (np.arange(batch_size)[:, None] * stream + k * length
                     + np.arange(length)[None, :])
            valid = weights > 0
            if collect:
                nll[index[valid]] = -log_probs[valid]
                gate[index[valid]] = gates[valid]
            if wanted and "attention" in extra:
                self._keep_attention(extra, index, k, length, valid, wanted, attention)
        return EvaluationResult(
            perplexity=math.exp(nll_sum / num_targets), nll_sum=nll_sum,
            num_targets=num_targets, mean_gate=gate_sum / num_targets, nll=nll, gate=gate,
            attention=attention,
        )

    def _keep_attention(self, extra, index, k, length, valid, wanted, attention):
        rows, cols = np.nonzero(valid & np.isin(index, list(wanted)))
        if not len(rows):
            return
        weights = ops.convert_to_numpy(extra["attention"])
        key_ids = ops.convert_to_numpy(extra["key_ids"])
        size = self.model.window_size
        num_memory = key_ids.shape[1] - length
        for b, t in zip(rows, cols, strict=True):
            j = int(index[b, t])
            # Keys of position t: num_memory + t - L + 1 .. num_memory + t (eq. 5's window),
            # of which only those since the start of the stream exist.
            last = num_memory + t
            first = max(last - size + 1, last - (k * length + t))
            attention[j] = {"key_ids": key_ids[b, first:last + 1].copy(),
                            "weights": weights[b, t, first:last + 1].copy()}

    def _scores(self, batch, state, memory):
        scores, outputs = self.model.score_step(
            batch["token_ids"], batch["targets"], batch["token_mask"], state, memory,
            target_mask=batch["target_weights"] > 0, token_chars=batch.get("token_chars"))
        log_probs, gate = scores["log_probs"], scores["gate"]
        extra = {}
        if "attention" in outputs:
            extra = {"attention": outputs["attention"], "key_ids": outputs["key_ids"]}
        return log_probs, gate, outputs["state"], outputs["memory"], extra
