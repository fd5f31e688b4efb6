"""Transforms of what clients send (``lightfed.core.transforms``), listed under ``transforms:`` in a config."""

from lightfed.privacy.secure_aggregation import SecureAggregation
from lightfed.privacy.user_level import UserLevelDP
from lightfed.transforms.norm_bounding import NormBounding
from lightfed.transforms.qsgd import QSGD
from lightfed.transforms.sign_compression import SignCompression
from lightfed.transforms.top_k import TopK

__all__ = ["QSGD", "NormBounding", "SecureAggregation", "SignCompression", "TopK", "UserLevelDP"]
