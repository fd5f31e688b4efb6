"""The proximal term: a pull of every local step toward an anchor, the weights the client started from (FedProx) or
the global model (Ditto's personal steps)."""

from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule


class ProximalTerm(LocalRule):
    """FedProx's client: adds mu (w - w_global) to the gradient of every step (the gradient of mu/2 ||w - w_global||^2,
    w_global the parameters given to ``start``, or ``anchor``)."""

    vectorizes = True

    def __init__(self, mu: float, anchor: Tensor | None = None) -> None:
        self.mu, self.given = mu, anchor

    def start(self, params: Tensor, context: LocalContext) -> None:
        self.anchor = params if self.given is None else self.given

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        grad.add_(params, alpha=self.mu).sub_(self.anchor, alpha=self.mu)
