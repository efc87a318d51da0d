"""Losses of the pointer sentinel mixture model."""

from psmm_tf.losses.pointer_sentinel_loss import PointerSentinelLoss

__all__ = ["PointerSentinelLoss"]
