"""`log softmax(z)[y]` on JAX, with a backward pass of its own.

JAX's automatic gradient of `z_y - logsumexp(z)` is the sum of two `(N, V)` terms: the
log-sum-exp's `-dy softmax(z)` and the gather's `dy one_hot(y)`, a scatter-add into a zero
tensor of the logits' size. On XLA's CPU backend the scatter, the sum of the two and a
transposed copy for the kernel's gradient were three more passes over the `(B, T, V)` logits
(docs/results.md, "TensorFlow and JAX backends"). Here the gradient `dy (one_hot(y) -
softmax(z))` is one elementwise expression, which XLA computes in one pass; the value is the
same expression as before, `z_y - logsumexp(z)`. TensorFlow's counterpart is
`target_log_softmax_tf`.
"""

import jax
import jax.numpy as jnp


@jax.custom_vjp
def target_log_softmax(logits, targets):
    """`log softmax(logits)[target]`, differentiable in `logits`.

    Args:
        logits: float `(..., V)`.
        targets: int `(...)` in `[0, V)` (checked by the caller).

    Returns:
        `(...)` in `logits`' dtype. Its gradient is `dy (one_hot(y) - softmax(z))`, in
        `logits`' dtype; `targets` get none.
    """
    return _forward(logits, targets)[0]


def _forward(logits, targets):
    log_sum = jax.nn.logsumexp(logits, axis=-1)
    target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return target_logit - log_sum, (logits, targets, log_sum)


def _backward(residuals, d_value):
    logits, targets, log_sum = residuals
    probs = jnp.exp(logits - log_sum[..., None])
    is_target = jnp.arange(logits.shape[-1], dtype=targets.dtype) == targets[..., None]
    d_value = d_value[..., None]
    d_logits = jnp.where(is_target, d_value - d_value * probs, -d_value * probs)
    return d_logits.astype(logits.dtype), None


target_log_softmax.defvjp(_forward, _backward)
