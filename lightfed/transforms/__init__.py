"""Transforms of what clients send (``lightfed.core.transforms``), listed under ``transforms:`` in a config."""

from lightfed.privacy.secure_aggregation import SecureAggregation
from lightfed.privacy.user_level import UserLevelDP
from lightfed.transforms.norm_bounding import NormBounding

__all__ = ["NormBounding", "SecureAggregation", "UserLevelDP"]
