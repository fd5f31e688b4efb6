"""Sign flipping: a malicious client sends its benign update negated (and scaled)."""

from torch import Tensor

from lightfed.attacks.base import Attack
from lightfed.core.messages import ClientPlan


class SignFlipping(Attack):
    """delta <- -scale x delta for the malicious clients (scale 1: the plain sign flip; Li et al.'s RSA used 4)."""

    def __init__(self, fraction: float, scale: float = 1.0) -> None:
        """
        Args:
            fraction: Share of all clients that is malicious.
            scale: The negated update's factor.
        """
        super().__init__(fraction)
        self.scale = scale

    def poison_update(self, delta: Tensor, plan: ClientPlan) -> None:
        delta.mul_(-self.scale)
