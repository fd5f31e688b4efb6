"""Client-side update rules that strategies hand to their clients."""

from lightfed.core.local_rule import LocalRule
from lightfed.local.correction import GradientCorrection
from lightfed.local.momentum_correction import MomentumCorrection
from lightfed.local.proximal import ProximalTerm
from lightfed.local.relative_progress import RelativeProgressRule
from lightfed.local.sharpness import SharpnessAware

__all__ = [
    "GradientCorrection",
    "LocalRule",
    "MomentumCorrection",
    "ProximalTerm",
    "RelativeProgressRule",
    "SharpnessAware",
]
