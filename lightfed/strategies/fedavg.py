"""FedAvg (McMahan et al. 2017): example-weighted average of client deltas, with a server learning rate."""

from collections.abc import Mapping

from torch import Tensor

from lightfed.errors import ConfigError
from lightfed.strategies.base import Strategy
from lightfed.sums import Sums
from lightfed.types import ClientUpdate


def fedavg_step(params: Tensor, weighted_delta_sum: Tensor, weight_sum: float, server_lr: float) -> Tensor:
    """x + server_lr * sum_i(w_i * delta_i) / sum_i(w_i)."""
    return params + server_lr * (weighted_delta_sum / weight_sum).to(params.dtype)


class FedAvg(Strategy):
    """Clients' deltas averaged with weights proportional to their number of examples."""

    def __init__(self, server_lr: float = 1.0) -> None:
        """
        Args:
            server_lr: Scale of the averaged delta applied to the global model (1.0 is plain FedAvg).
        """
        if server_lr <= 0:
            raise ConfigError(f"strategy.server_lr must be > 0, got {server_lr}")
        self.server_lr = server_lr

    def sum_sizes(self) -> dict[str, int]:
        return {"delta": self.num_params, "weight": 1}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        sums.add("delta", update.delta, weight=update.num_examples)
        sums.add("weight", update.num_examples)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        return fedavg_step(params, sums["delta"], float(sums["weight"]), self.server_lr)
