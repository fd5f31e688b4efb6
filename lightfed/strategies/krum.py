"""Krum and Multi-Krum (Blanchard et al., NeurIPS 2017): the client delta(s) closest to their n - f - 2 nearest
neighbours."""

import torch
from torch import Tensor

from lightfed.core.sharding import sum_rows
from lightfed.errors import ConfigError
from lightfed.strategies.pairwise_distances import ShardedDistances
from lightfed.strategies.sharded_base import ShardedRound, ShardedStrategy


def krum_scores(distances: Tensor, neighbours: int) -> Tensor:
    """Per row of the squared-distance matrix, the sum of its ``neighbours`` smallest distances to the other rows."""
    return distances.sort(dim=1).values[:, 1 : 1 + neighbours].sum(1)  # column 0: the row itself (0)


def krum_order(distances: Tensor, num_byzantine: int) -> Tensor:
    """Row indices by increasing Krum score, ties to the lower index; refuses n <= 2f + 2."""
    count = len(distances)
    if count <= 2 * num_byzantine + 2:
        raise ConfigError(
            f"Krum needs more than 2f + 2 = {2 * num_byzantine + 2} clients in a round with strategy.num_byzantine "
            f"{num_byzantine}, got {count}: raise trainer.clients_per_round or lower strategy.num_byzantine"
        )
    return torch.argsort(krum_scores(distances, count - num_byzantine - 2), stable=True)


class Krum(ShardedStrategy):
    """x <- x + server_lr * the delta with the lowest Krum score, assuming at most ``num_byzantine`` Byzantine clients
    a round. The pairwise distances come from the coordinate shards (one all-reduce of per-pair partial sums)."""

    def __init__(self, num_byzantine: int = 1, server_lr: float = 1.0) -> None:
        """
        Args:
            num_byzantine: f, the Byzantine clients tolerated in a round (a round needs more than 2f + 2 clients).
            server_lr: Server step size on the aggregate.
        """
        if num_byzantine < 0:
            raise ConfigError(f"strategy.num_byzantine must be >= 0, got {num_byzantine}")
        self.num_byzantine, self.server_lr = num_byzantine, server_lr

    def kept(self, clients: int) -> int:
        """How many of the best-scored deltas are averaged: Krum keeps one."""
        return 1

    def aggregate_shard(self, params: Tensor, updates: ShardedRound) -> Tensor:
        distances = ShardedDistances(self.num_params, self.shard, updates.all_reduce).pairwise(updates.deltas)
        rows = krum_order(distances, self.num_byzantine)[: self.kept(len(distances))].sort().values
        return params + self.server_lr * (sum_rows(updates.deltas[rows].double()) / len(rows)).to(params.dtype)


class MultiKrum(Krum):
    """x <- x + server_lr * the mean of the ``m`` deltas with the lowest Krum scores (Blanchard et al.'s Multi-Krum;
    m = 1 is Krum, m = n averages every delta)."""

    def __init__(self, num_byzantine: int = 1, m: int | None = None, server_lr: float = 1.0) -> None:
        """
        Args:
            num_byzantine: f, the Byzantine clients tolerated in a round.
            m: Deltas averaged; null: n - f of the round's n clients.
            server_lr: Server step size on the aggregate.
        """
        super().__init__(num_byzantine, server_lr)
        if m is not None and m < 1:
            raise ConfigError(f"strategy.m must be >= 1 or null, got {m}")
        self.m = m

    def kept(self, clients: int) -> int:
        return min(clients, clients - self.num_byzantine if self.m is None else self.m)
