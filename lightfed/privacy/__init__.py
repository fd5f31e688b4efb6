"""Differential privacy: of clients' local training (``trainer.privacy``), and user-level (``UserLevelDP``)."""

from lightfed.privacy.base import ClientPrivacy, NoPrivacy
from lightfed.privacy.clipped_noise import ClippedGaussianNoise
from lightfed.privacy.dp_sgd import DPSGD
from lightfed.privacy.secure_aggregation import SecureAggregation
from lightfed.privacy.user_level import UserLevelDP

__all__ = ["DPSGD", "ClientPrivacy", "ClippedGaussianNoise", "NoPrivacy", "SecureAggregation", "UserLevelDP"]
