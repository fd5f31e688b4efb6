"""Gaussian updates: a malicious client sends random noise instead of its update."""

import torch
from torch import Tensor

from lightfed.attacks.base import Attack
from lightfed.core.messages import ClientPlan


class GaussianUpdates(Attack):
    """delta <- N(0, std^2 I) for the malicious clients, drawn from the client's seed of the round."""

    def __init__(self, fraction: float, std: float = 1.0) -> None:
        """
        Args:
            fraction: Share of all clients that is malicious.
            std: Standard deviation of every coordinate.
        """
        super().__init__(fraction)
        self.std = std

    def poison_update(self, delta: Tensor, plan: ClientPlan) -> None:
        generator = torch.Generator().manual_seed(plan.seed)
        delta.copy_(torch.randn(delta.shape, generator=generator).mul_(self.std))
