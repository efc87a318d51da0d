"""Losses of the pointer sentinel mixture model."""

from psmm_tf.losses.mixture_nll import MixtureNLL
from psmm_tf.losses.objective import per_target_losses, window_sums
from psmm_tf.losses.pointer_sentinel_loss import PointerSentinelLoss

__all__ = ["MixtureNLL", "PointerSentinelLoss", "per_target_losses", "window_sums"]
