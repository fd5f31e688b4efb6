"""MasFL's local direction (Yan et al. 2025): momentum and control variates, optionally as a normalised step."""

from typing import Any

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule
from lightfed.core.requirements import Requirements, Sent

EPS = 1e-12  # guards the normalisation of a zero direction


class MomentumCorrection(LocalRule):
    """Replaces the gradient by g = beta * grad + offset (MasFL: offset = u - beta * c_i, with u = beta c + (1 - beta) g
    the server's broadcast); with ``normalise``, by g / ||g|| over all parameters (AdaMasFL), so every step of plain
    SGD has length exactly its learning rate.

    Reports ``grad_mean``: the mean of the raw gradients along the local trajectory (the client's next control
    variate c_i). Needs plain SGD (no momentum or weight decay): the rule is the whole update direction.
    """

    requirements = Requirements(plain_sgd=True, no_weight_decay=True, sends=frozenset({Sent("grad_mean", "gradients")}))

    def __init__(self, beta: float, offset: Tensor | None, normalise: bool = False) -> None:
        """``offset`` None adds nothing (the warm-up, where only the raw gradients are wanted)."""
        self.beta, self.offset, self.normalise = beta, offset, normalise

    def start(self, params: Tensor, context: LocalContext) -> None:
        self.grad_sum = torch.zeros_like(params)
        self.steps = 0

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        self.grad_sum.add_(grad)
        self.steps += 1
        if self.offset is not None:
            grad.mul_(self.beta).add_(self.offset)
        if self.normalise:
            grad.div_(grad.norm().clamp_min(EPS))

    def report(self) -> dict[str, Any]:
        return {"grad_mean": self.grad_sum / max(self.steps, 1)}
