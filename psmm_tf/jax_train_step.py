"""A training step of the package's language models on the JAX backend.

The TensorFlow trainer (`psmm_tf.training.steps.TrainStep`) runs on `tf.distribute`; this is the
same step for the Keras JAX backend, so the model trains with XLA on a machine that has JAX but
no TensorFlow (e.g. a GPU host): the same settings, model call, objective, clipping and carried
values (`psmm_tf.gradients.WindowStepSettings`, which both steps build on). It is a pure
function of the variables' values (`value_and_grad` over `stateless_call`,
`optimizer.stateless_apply`), compiled by `jax.jit`.
"""

import keras
from keras import ops

from psmm_tf.gradients import WindowStepSettings


class JaxTrainStep(WindowStepSettings):
    """One compiled training step of a `LanguageModel` on the JAX backend.

    Args:
        model: a `LanguageModel`.
        optimizer: a Keras optimizer (built here for the model's trainable variables).
        settings, named_settings: `psmm_tf.gradients.WindowStepSettings`'s arguments after
            `model` (global_batch_size, context_length, use_memory, clip norms, ...).

    Call arguments and returns: `TrainStep`'s, on one device (state and memory as arrays of B
    rows, None at the start: `zero_carry`); the model's and the optimizer's variables are
    updated. `pointer_share` (a float in [0, 1], default 1) is the pointer's share of the
    objective, `(1 - share) p_vocab + share p`: psmm-train's pointer warm-up passes
    `psmm_tf.gradients.warmup_factor(global_step, TrainConfig.pointer_warmup_steps)` at each
    update, which a loop of this step passes the same way to train as psmm-train does.
    """

    def __init__(self, model, optimizer, *settings, **named_settings):
        if keras.backend.backend() != "jax":
            raise RuntimeError("JaxTrainStep needs the JAX backend (KERAS_BACKEND=jax), got "
                               f"{keras.backend.backend()!r}.")
        import jax

        super().__init__(model, *settings, **named_settings)
        self.optimizer = optimizer
        optimizer.build(model.trainable_variables)
        self._value_and_grad = jax.value_and_grad(self._loss, has_aux=True)
        self._step = jax.jit(self._pure_step)

    def loss_and_gradients(self, batch, state=None, memory=None, pointer_share=1.0):
        """The step's loss (sum over targets / B) and unclipped gradients, nothing updated.

        Returns:
            `(loss, grads)`: a scalar and a list in `model.trainable_variables` order (under
            loss scaling, both times the current loss scale).
        """
        state, memory = self._carry(state, memory)
        (loss, _), grads = self._value_and_grad(
            [v.value for v in self.model.trainable_variables],
            [v.value for v in self.model.non_trainable_variables],
            [v.value for v in self.optimizer.variables], batch, state, memory,
            _share(pointer_share))
        return loss, grads

    def __call__(self, batch, state=None, memory=None, pointer_share=1.0):
        state, memory = self._carry(state, memory)
        model, optimizer = self.model, self.optimizer
        trainable, non_trainable, optimizer_values, metrics, state, memory = self._step(
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
            [v.value for v in optimizer.variables], batch, state, memory,
            _share(pointer_share))
        for variables, values in ((model.trainable_variables, trainable),
                                  (model.non_trainable_variables, non_trainable),
                                  (optimizer.variables, optimizer_values)):
            for variable, value in zip(variables, values, strict=True):
                variable.assign(value)
        return metrics, state, memory

    def _carry(self, state, memory):
        batch_size = self.global_batch_size
        state = self.model.zero_state(batch_size) if state is None else state
        if self.use_memory and memory is None:
            memory = self.model.empty_memory(batch_size)
        return state, memory if self.use_memory else None

    def _loss(self, trainable, non_trainable, optimizer_values, batch, state, memory,
              pointer_share):
        outputs, non_trainable = self.model.stateless_call(
            trainable, non_trainable, batch["token_ids"],
            **self.call_arguments(batch, state, memory))
        sums = self.window_sums(outputs, batch, pointer_share)
        # Sum over the window's targets, mean over the batch's streams (as TrainStep), times
        # the dynamic loss scale under mixed_float16 (read from the optimizer's values).
        loss = sums["loss"] / float(self.global_batch_size)
        with keras.StatelessScope(state_mapping=list(zip(self.optimizer.variables,
                                                         optimizer_values, strict=True))):
            loss = self.optimizer.scale_loss(loss)
        return loss, (sums, non_trainable, *self.carried(outputs))

    def _pure_step(self, trainable, non_trainable, optimizer_values, batch, state, memory,
                   pointer_share):
        (_, (sums, non_trainable, state, memory)), grads = self._value_and_grad(
            trainable, non_trainable, optimizer_values, batch, state, memory, pointer_share)
        # Scaled gradients are clipped at the scaled limits (as TrainStep); the optimizer
        # unscales them, and skips the update where they are not finite.
        grads, grad_norm = self.clip(grads, self._loss_scale(optimizer_values))
        trainable, optimizer_values = self.optimizer.stateless_apply(optimizer_values, grads,
                                                                     trainable)
        metrics = dict(sums, grad_norm=grad_norm)
        return trainable, non_trainable, optimizer_values, metrics, state, memory

    def _loss_scale(self, optimizer_values):
        """The dynamic loss scale among `optimizer_values` (a LossScaleOptimizer's), else 1.0."""
        if not isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
            return 1.0
        index = next(i for i, v in enumerate(self.optimizer.variables)
                     if v is self.optimizer.dynamic_scale)
        return ops.cast(optimizer_values[index], "float32")


def _share(pointer_share):
    """`pointer_share` as a float32 array: one compiled step for every value (as TrainStep)."""
    return ops.convert_to_tensor(pointer_share, "float32")
