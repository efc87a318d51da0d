"""One training step over a window batch, on any `tf.distribute` strategy (docs/architecture.md).

The objective (`per_target_losses`: the mixture's negative log-likelihood, plus eq. 9's pointer
term when its weight is set) is summed over the T predicted positions of a window and
averaged over the B streams of the global batch; N replicas with B / N rows each compute the
gradient one device with B rows would. The gradients are clipped by `clip_gradients` (the
pointer's own variables apart when `pointer_clip_norm` is set, a character-CNN input embedding's
when `char_cnn_clip_norm` is) and applied once: with a plain Keras SGD on one device as
`psmm_tf.training.sgd_update` does it (the clip scale folded into the update, 16-bit gradients
read as they are), else by the optimizer. Why this objective and these clips:
docs/design_notes.md, "Objective: sum over a window's targets".
"""

import keras
import tensorflow as tf

from psmm_tf import native as native_kernels
from psmm_tf.compiled import graph_function
from psmm_tf.gradients import WindowStepSettings, clip_scales
from psmm_tf.training import distribution, sgd_update


def loss_scale(optimizer):
    """The dynamic loss scale of a `keras.optimizers.LossScaleOptimizer` (float32), else 1.0."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return tf.cast(optimizer.dynamic_scale, tf.float32)
    return 1.0


class TrainStep(WindowStepSettings):
    """A compiled training step that carries LSTM state and pointer memory per replica.

    Args:
        model: a `LanguageModel`, built under `strategy.scope()`.
        optimizer: a Keras optimizer, built under `strategy.scope()`.
        strategy: a `tf.distribute.Strategy` (the default strategy for one device).
        settings, named_settings: `psmm_tf.gradients.WindowStepSettings`'s arguments after
            `model` (global_batch_size, context_length, use_memory, clip norms, ...).
        jit_compile: bool. XLA-compile the forward and backward pass.

    psmm_tf's native CPU kernels run in the step as the one switch says when it traces
    (`psmm_tf.native.configure`; a psmm-train run sets it from `TrainConfig.native`).

    Call arguments:
        batch: dict of global tensors from `training_windows`: `token_ids`, `token_mask`
            `(B, C + T)`, `targets`, `target_weights` `(B, T)`.
        state, memory: per-replica carried values (see `initial_carry`).
        pointer_share: float in [0, 1]: the objective is that of `(1 - pointer_share) p_vocab
            + pointer_share p` (`per_target_losses`; 1: the model's own mixture).

    Returns:
        `(metrics, state, memory)`: `metrics` holds global sums over the batch (`loss`: the
        objective, `nll`, `pointer_loss`, `gate`, `weight`: the number of targets) and
        `grad_norm`; `state` and `memory` are per-replica values for the next step.

    Example:
    ```python
    import keras
    import tensorflow as tf
    from psmm_tf.data.pipeline import training_windows
    from psmm_tf.models import LSTMBackbone, PointerSentinelLM
    from psmm_tf.training.steps import TrainStep

    strategy = tf.distribute.get_strategy()
    backbone = LSTMBackbone(vocab_size=100, embedding_dim=16, hidden_dim=16, num_layers=2)
    model = PointerSentinelLM(backbone, window_size=10)
    step = TrainStep(model, keras.optimizers.SGD(1.0), strategy, global_batch_size=4,
                     context_length=0, use_memory=True)
    state, memory = step.initial_carry()
    ids = tf.random.stateless_uniform([2000], (1, 2), maxval=100, dtype=tf.int32)
    for batch in training_windows(ids, batch_size=4, context_length=0, num_predicted=35).take(3):
        metrics, state, memory = step(batch, state, memory)
    ```
    """

    def __init__(self, model, optimizer, strategy, *settings, jit_compile=False,
                 **named_settings):
        super().__init__(model, *settings, **named_settings)
        self.jit_compile = bool(jit_compile)
        self.optimizer = optimizer
        self.strategy = strategy
        self.rows = distribution.rows_per_replica(self.global_batch_size, strategy)
        self.plain_sgd = sgd_update.supports(optimizer, model.trainable_variables)
        if not optimizer.built:  # its variables (a loss scale's too) exist before the first step
            with strategy.scope():
                optimizer.build(model.trainable_variables)
        self._forward_backward = graph_function(self._gradients, jit_compile=jit_compile)
        self._step = graph_function(self._distributed_step)

    def initial_carry(self):
        """Zero LSTM state and (in "cache" mode) an empty memory, as per-replica values."""
        with self.strategy.scope():
            carry = self.zero_carry()
        return self.distribute(*carry)

    def distribute(self, state, memory):
        """Global carried values -> per-replica values (each replica its own rows)."""
        return (distribution.distribute_rows(self.strategy, state, self.rows),
                distribution.distribute_rows(self.strategy, memory, self.rows))

    def gather(self, state, memory):
        """Per-replica carried values -> global tensors (a collective on multi-worker)."""
        return (distribution.gather_rows(self.strategy, state),
                distribution.gather_rows(self.strategy, memory))

    def __call__(self, batch, state, memory, pointer_share=1.0):
        share = tf.constant(pointer_share, tf.float32)  # a tensor: no retracing per value
        # The native kernels where they build and run (psmm_tf.native): this graph is never
        # exported. The forward and backward pass says whether it is XLA-compiled (_gradients).
        with native_kernels.enabled():
            return self._step(batch, state, memory, share)

    def _distributed_step(self, batch, state, memory, pointer_share):
        sums, grad_norm, state, memory = self.strategy.run(
            self._replica_step, args=(batch, state, memory, pointer_share))
        metrics = {key: self.strategy.reduce("SUM", value, axis=None)
                   for key, value in sums.items()}
        metrics["grad_norm"] = self.strategy.reduce("MEAN", grad_norm, axis=None)
        return metrics, state, memory

    def _replica_step(self, batch, state, memory, pointer_share):
        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync
        local = distribution.replica_rows(batch, self.rows, context.replica_id_in_sync_group)
        # Sum over the window's targets, mean over the global batch's streams (see above).
        normalizer = tf.constant(float(self.global_batch_size))
        grads, sums, state, memory = self._forward_backward(local, state, memory, normalizer,
                                                            pointer_share)
        if self._fused_update():
            scales, grad_norm = clip_scales(grads, self.clip_norm, self.clip_groups)
            sgd_update.apply(self.optimizer, grads, self.model.trainable_variables, scales)
            return sums, grad_norm, state, memory
        # Float32 gradients from here: the replicas sum them in float32 (exact widening).
        grads = [tf.cast(g, tf.float32) if g.dtype in sgd_update.SIXTEEN_BIT else g
                 for g in grads]
        # Sum over replicas first, then clip: the norm is the global batch's (paper: 1).
        grads = context.all_reduce("SUM", grads)
        # Under loss scaling the optimizer unscales the clipped gradients.
        grads, grad_norm = self.clip(grads, loss_scale(self.optimizer))
        if replicas > 1:
            # The Keras optimizer sums gradients over replicas once more before applying them.
            grads = [g / replicas for g in grads]
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
        return sums, grad_norm, state, memory

    def _fused_update(self):
        """Whether this trace applies `sgd_update` (plain SGD on one device, the default)
        rather than the all-reduce, `clip_gradients` and Keras' update."""
        return self.plain_sgd and not tf.distribute.has_strategy()

    def _gradients(self, local, state, memory, normalizer, pointer_share=None):
        with native_kernels.enabled(jit_compile=self.jit_compile):
            with tf.GradientTape() as tape:
                outputs = self.model(local["token_ids"],
                                     **self.call_arguments(local, state, memory))
                sums = self.window_sums(outputs, local, pointer_share)
                # Times the dynamic loss scale under mixed_float16 (LossScaleOptimizer).
                loss = self.optimizer.scale_loss(sums["loss"] / normalizer)
            grads = tape.gradient(loss, self.model.trainable_variables)
            if self._fused_update():
                # 16-bit gradients as computed, the embedding's rows as looked up (sgd_update).
                grads = [sgd_update.unwidened(sgd_update.deduplicated(g)) for g in grads]
            else:
                # Dense gradients (the embedding's are IndexedSlices) for the all-reduce and
                # scaling.
                grads = [tf.convert_to_tensor(g) for g in grads]
            return grads, sums, *self.carried(outputs)
