"""FedAvgM (Hsu et al. 2019): the averaged client delta drives server momentum."""

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from lightfed.errors import ConfigError
from lightfed.strategies.base import ServerContext
from lightfed.strategies.fedavg import FedAvg


def momentum_step(
    params: Tensor, velocity: Tensor, delta: Tensor, server_lr: float, momentum: float
) -> tuple[Tensor, Tensor]:
    """v+ = momentum * v + delta and x+ = x + server_lr * v+. Returns (x+, v+), new tensors."""
    velocity = velocity.mul(momentum).add_(delta)
    return params + server_lr * velocity, velocity


class FedAvgM(FedAvg):
    """Example-weighted mean delta, applied through server momentum.

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedAvgM
      init_args: {server_lr: 1.0, momentum: 0.9}
    ```

    Examples:
        The same mean delta two rounds running: the second step adds the momentum of the first.

        >>> import torch
        >>> from lightfed.strategies import FedAvgM, ServerContext
        >>> strategy = FedAvgM(momentum=0.5)
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=1))
        >>> sums = {"delta": torch.tensor([1.0]), "weight": torch.tensor(1.0)}  # a round's sums (sum_sizes)
        >>> params = strategy.aggregate(torch.zeros(1), sums, round=0)
        >>> strategy.aggregate(params, sums, round=1)
        tensor([2.5000])
        >>> FedAvgM(momentum=1.0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: strategy.momentum must be in [0, 1), got 1.0
    """

    def __init__(self, server_lr: float = 1.0, momentum: float = 0.9) -> None:
        """
        Args:
            server_lr: Server learning rate.
            momentum: Server momentum (0 is FedAvg).

        Raises:
            ConfigError: ``server_lr`` is not positive or ``momentum`` is outside [0, 1).
        """
        if not 0 <= momentum < 1:
            raise ConfigError(f"strategy.momentum must be in [0, 1), got {momentum}")
        super().__init__(server_lr=server_lr)
        self.momentum = momentum

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        self.velocity = torch.zeros_like(context.params)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        delta = (sums["delta"] / sums["weight"]).to(params.dtype)
        params, self.velocity = momentum_step(params, self.velocity, delta, self.server_lr, self.momentum)
        return params

    def state_dict(self) -> dict[str, Any]:
        return {"velocity": self.velocity}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.velocity.copy_(state["velocity"])
