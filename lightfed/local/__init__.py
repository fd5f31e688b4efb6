"""Client-side update rules that several algorithms share (``ProximalTerm``: FedProx and Ditto); a rule of one
algorithm only lives in its strategy's module (``RelativeProgressRule`` in ``lightfed.strategies.adaptfed``,
``MomentumCorrection`` in ``lightfed.strategies.masfl``)."""

from lightfed.core.local_rule import LocalRule
from lightfed.local.correction import GradientCorrection
from lightfed.local.sharpness import SharpnessAware

__all__ = ["GradientCorrection", "LocalRule", "SharpnessAware"]
