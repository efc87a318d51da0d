"""The LSTM cell's equations with zoneout, shared by every path of `ZoneoutLSTM`."""

from keras import ops


def lstm_cell(gates, c_prev):
    """One LSTM step from its pre-activations, gates in Keras' order (input, forget, cell,
    output): `c' = sig(f) c_prev + sig(i) tanh(g)`, `h' = sig(o) tanh(c')`.

    Args:
        gates: `(B, 4H)`, `x_t W + b + h_{t-1} U`.
        c_prev: `(B, H)`.

    Returns:
        `(activations, c_new, h_new)`: `activations` the tuple `(sig(i), sig(f), tanh(g),
        sig(o), tanh(c'))` (what a backward pass needs), and `c'`, `h'` `(B, H)`.
    """
    i, f, g, o = ops.split(gates, 4, axis=-1)
    i, f, g, o = ops.sigmoid(i), ops.sigmoid(f), ops.tanh(g), ops.sigmoid(o)
    c_new = f * c_prev + i * g
    tanh_c = ops.tanh(c_new)
    return (i, f, g, o, tanh_c), c_new, o * tanh_c


def zoneout(new, previous, keep):
    """Zoneout (Krueger et al. 2016): `keep * previous + (1 - keep) * new`, with `keep` 0/1 in
    training and the zoneout probability at inference."""
    return new + keep * (previous - new)
