"""Optimizer wrappers for client training."""

from lightfed.optim.sam import SAM, sam_perturbation

__all__ = ["SAM", "sam_perturbation"]
