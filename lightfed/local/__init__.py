"""Client-side update rules that strategies hand to their clients."""

from lightfed.local.base import LocalRule
from lightfed.local.correction import GradientCorrection
from lightfed.local.proximal import ProximalTerm

__all__ = ["GradientCorrection", "LocalRule", "ProximalTerm"]
