"""Norm bounding (Sun et al. 2019, "Can you really backdoor federated learning?"): every client's delta clipped in L2
before the server aggregates it."""

from collections.abc import Mapping
from dataclasses import replace

import torch
from torch import Tensor

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies.base import Strategy
from lightfed.strategies.wrapper import SumsStrategyWrapper

CLIPPED, CLIENTS = "norm_bounding/clipped", "norm_bounding/clients"


def bounded(delta: Tensor, max_norm: float) -> Tensor:
    """delta x min(1, max_norm / ||delta||_2)."""
    norm = float(torch.linalg.vector_norm(delta))
    return delta * (max_norm / norm) if norm > max_norm else delta


class NormBounding(SumsStrategyWrapper):
    """The inner strategy of the sums path, each client's delta first scaled to L2 norm at most ``max_norm``. Logs the
    fraction of the round's clients whose delta was clipped."""

    def __init__(self, strategy: Strategy, max_norm: float) -> None:
        """
        Args:
            strategy: The strategy that aggregates the bounded deltas (sums path: FedAvg, FedAdam, Scaffold, ...).
            max_norm: Largest L2 norm of a client's delta.
        """
        if not max_norm > 0:
            raise ConfigError(f"strategy.max_norm must be > 0, got {max_norm}")
        super().__init__(strategy)
        self.max_norm = max_norm
        self.clipped_fraction = 0.0

    def sum_sizes(self) -> dict[str, int]:
        return {**super().sum_sizes(), CLIPPED: 1, CLIENTS: 1}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        delta = bounded(update.delta, self.max_norm)
        sums.add(CLIPPED, float(delta is not update.delta))
        sums.add(CLIENTS, 1)
        super().accumulate(sums, replace(update, delta=delta))

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        self.clipped_fraction = float(sums[CLIPPED] / sums[CLIENTS])
        return super().aggregate(params, sums, round)

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "clipped_fraction": self.clipped_fraction}
