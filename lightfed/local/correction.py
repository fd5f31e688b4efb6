"""A constant vector added to every local gradient (SCAFFOLD's c - c_i, FedECADO's coupling current)."""

from torch import Tensor

from lightfed.core.local_rule import LocalRule


class GradientCorrection(LocalRule):
    """Adds ``factor`` x ``vector`` (flat, on the client's device) to the gradient of every step.

    A strategy builds one per client in ``configure_client`` (SCAFFOLD's ``c - c_i``).

    Examples:
        >>> import torch
        >>> from lightfed.local import GradientCorrection
        >>> rule = GradientCorrection(torch.tensor([0.1, -0.1]), factor=2.0)
        >>> grad = torch.tensor([1.0, 1.0])
        >>> rule.adjust(grad, params=torch.zeros(2))
        >>> grad
        tensor([1.2000, 0.8000])
    """

    vectorizes = True

    def __init__(self, vector: Tensor, factor: float = 1.0) -> None:
        self.vector, self.factor = vector, factor

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        grad.add_(self.vector, alpha=self.factor)
