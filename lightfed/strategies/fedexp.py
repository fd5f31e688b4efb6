"""FedExP (Jhunjhunwala et al. 2023): an extrapolated server step from the clients' disagreement (POCS view)."""

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies.fedavg import FedAvg


def fedexp_server_lr(sum_sq_norms: float, mean_delta_sq_norm: float, num_clients: float, eps: float) -> float:
    """max(1, sum_i ||D_i||^2 / (2 M (||mean D||^2 + eps)))."""
    return max(1.0, sum_sq_norms / (2 * num_clients * (mean_delta_sq_norm + eps)))


class FedExP(FedAvg):
    """x <- x + eta_g mean(D_i), with eta_g = max(1, sum ||D_i||^2 / (2 M (||mean D||^2 + eps))) and uniform mean."""

    def __init__(self, eps: float = 1e-3) -> None:
        """
        Args:
            eps: Keeps the extrapolation bounded when the mean delta is small.
        """
        if eps <= 0:
            raise ConfigError(f"strategy.eps must be > 0, got {eps}")
        super().__init__(server_lr=1.0, weighting="uniform")
        self.eps = eps
        self.last_server_lr = 1.0

    def sum_sizes(self) -> dict[str, int]:
        return {**super().sum_sizes(), "sq_norms": 1}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        super().accumulate(sums, update)
        sums.add("sq_norms", update.delta.square().sum())

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        count = float(sums["weight"])
        mean_delta = sums["delta"] / count
        self.last_server_lr = fedexp_server_lr(
            float(sums["sq_norms"]), float(mean_delta.square().sum()), count, self.eps
        )
        return params + self.last_server_lr * mean_delta.to(params.dtype)

    def metrics(self) -> dict[str, float]:
        return {"server_lr": self.last_server_lr}

    def state_dict(self) -> dict[str, Any]:
        return {"last_server_lr": self.last_server_lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_server_lr = state["last_server_lr"]
