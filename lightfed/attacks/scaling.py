"""Scaling (boosting): a malicious client sends its update multiplied by a factor."""

from torch import Tensor

from lightfed.attacks.base import Attack
from lightfed.core.messages import ClientPlan


class Scaling(Attack):
    """delta <- factor x delta for the malicious clients (with a data attack trained first, Bagdasaryan et al.'s
    model replacement boosts by about clients / malicious)."""

    def __init__(self, fraction: float, factor: float = 10.0) -> None:
        """
        Args:
            fraction: Share of all clients that is malicious.
            factor: The update's factor.
        """
        super().__init__(fraction)
        self.factor = factor

    def poison_update(self, delta: Tensor, plan: ClientPlan) -> None:
        delta.mul_(self.factor)
