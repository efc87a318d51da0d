"""Static shape checks shared by the layers: fail early with the argument's name."""

from keras import ops


def check_rank(name, tensor, rank):
    """Raises ValueError unless `tensor` has `rank` dimensions (when the rank is known)."""
    actual = len(ops.shape(tensor))
    if actual != rank:
        raise ValueError(
            f"`{name}` must have rank {rank}, got rank {actual} with shape {ops.shape(tensor)}."
        )


def check_same_static_dim(name_a, tensor_a, axis_a, name_b, tensor_b, axis_b):
    """Raises ValueError when two dimensions are both known and differ."""
    dim_a = ops.shape(tensor_a)[axis_a]
    dim_b = ops.shape(tensor_b)[axis_b]
    if isinstance(dim_a, int) and isinstance(dim_b, int) and dim_a != dim_b:
        raise ValueError(
            f"Dimension {axis_a} of `{name_a}` (shape {ops.shape(tensor_a)}) must equal "
            f"dimension {axis_b} of `{name_b}` (shape {ops.shape(tensor_b)}): {dim_a} != {dim_b}."
        )
