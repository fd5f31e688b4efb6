"""A constant vector added to every local gradient (SCAFFOLD's c - c_i, FedECADO's coupling current)."""

from torch import Tensor

from lightfed.core.local_rule import LocalRule


class GradientCorrection(LocalRule):
    """Adds ``factor`` x ``vector`` (flat, on the client's device) to the gradient of every step."""

    vectorizes = True

    def __init__(self, vector: Tensor, factor: float = 1.0) -> None:
        self.vector, self.factor = vector, factor

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        grad.add_(self.vector, alpha=self.factor)
