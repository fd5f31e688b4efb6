"""FedProx's proximal term (Li et al. 2020): mu/2 ||w - w_global||^2 added to the local objective."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

from lightfed.local.base import LocalRule

if TYPE_CHECKING:
    from lightfed.core.client import ClientTrainer


class ProximalTerm(LocalRule):
    """Adds mu (w - w_global) to the gradient."""

    def __init__(self, mu: float) -> None:
        self.mu = mu

    def start(self, params: Tensor, client: ClientTrainer) -> None:
        self.anchor = params

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        grad.add_(params, alpha=self.mu).sub_(self.anchor, alpha=self.mu)
