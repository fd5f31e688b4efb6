"""Gaussian updates: a malicious client sends random noise instead of its update."""

import torch
from torch import Tensor

from lightfed.attacks.base import Attack
from lightfed.core.messages import ClientPlan


class GaussianUpdates(Attack):
    """delta <- N(0, std^2 I) for the malicious clients, drawn from the client's seed of the round.

    In a config:

    ```yaml
    trainer:
      attack:
        class_path: lightfed.attacks.GaussianUpdates
        init_args: {fraction: 0.2, std: 1.0}
    ```

    Examples:
        The noise replaces the update and depends only on the plan's seed:

        >>> import torch
        >>> from lightfed import ClientPlan
        >>> from lightfed.attacks import GaussianUpdates
        >>> attack = GaussianUpdates(fraction=1.0, std=0.1)
        >>> attack.draw(num_clients=4, seed=0)
        >>> first, second = torch.ones(3), torch.zeros(3)
        >>> attack.update(first, ClientPlan(client_id=0, round=0, seed=7))
        >>> attack.update(second, ClientPlan(client_id=0, round=0, seed=7))
        >>> torch.equal(first, second)
        True
    """

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
