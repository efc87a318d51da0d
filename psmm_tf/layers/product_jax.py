"""`X W` on JAX, the kernel's gradient taken as the transpose of `dY^T X`.

JAX's own gradient of the product, `X^T dY`, sums over the rows of both; XLA's CPU backend
then copies the `(N, out)` output gradient into a transposed layout before the product. For
the vocabulary head (`out` = V = 10,000, N = B T rows) that copy was a pass over the `(B, T, V)`
gradient; `(dY^T X)^T` transposes the `(out, in)` result instead, the same numbers
(docs/results.md, "TensorFlow and JAX backends"). `dense.weight_gradient` is TensorFlow's
counterpart.
"""

import jax
import jax.numpy as jnp


@jax.custom_vjp
def product(inputs, kernel):
    """`inputs W` over the last axis.

    Args:
        inputs: float `(..., in)`.
        kernel: `(in, out)`.

    Returns:
        `(..., out)`, as `jnp.matmul`; the gradients are `dY W^T` and `(dY^T X)^T`.
    """
    return jnp.matmul(inputs, kernel)


def _forward(inputs, kernel):
    return jnp.matmul(inputs, kernel), (inputs, kernel)


def _backward(residuals, grad_outputs):
    inputs, kernel = residuals
    rows = grad_outputs.reshape(-1, grad_outputs.shape[-1])  # (N, out)
    flat_inputs = inputs.reshape(-1, inputs.shape[-1])  # (N, in)
    grad_kernel = jax.lax.dot_general(rows, flat_inputs, (((0,), (0,)), ((), ()))).T
    grad_inputs = jnp.matmul(grad_outputs, kernel.T)
    return grad_inputs.astype(inputs.dtype), grad_kernel.astype(kernel.dtype)


product.defvjp(_forward, _backward)
