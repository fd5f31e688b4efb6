"""Differential privacy for clients' local training (``trainer.privacy``)."""

from lightfed.privacy.base import ClientPrivacy
from lightfed.privacy.clipped_noise import ClippedGaussianNoise
from lightfed.privacy.dp_sgd import DPSGD
from lightfed.privacy.secure_aggregation import SecureAggregation

__all__ = ["DPSGD", "ClientPrivacy", "ClippedGaussianNoise", "SecureAggregation"]
