"""FedProx's proximal term (Li et al. 2020): mu/2 ||w - w_global||^2 added to the local objective."""

from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule


class ProximalTerm(LocalRule):
    """Adds mu (w - w_global) to the gradient."""

    def __init__(self, mu: float) -> None:
        self.mu = mu

    def start(self, params: Tensor, context: LocalContext) -> None:
        self.anchor = params

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        grad.add_(params, alpha=self.mu).sub_(self.anchor, alpha=self.mu)
