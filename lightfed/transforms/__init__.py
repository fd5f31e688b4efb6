"""Transforms of what clients send (``lightfed.core.transforms``), listed under ``transforms:`` in a config."""

from lightfed.transforms.norm_bounding import NormBounding

__all__ = ["NormBounding"]
