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
    a round. The pairwise distances come from the coordinate shards (one all-reduce of per-pair partial sums).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.Krum
      init_args: {num_byzantine: 6}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.strategies import Krum, ServerContext, ShardedRound
        >>> deltas = torch.tensor([[1.0], [1.2], [0.9], [1.1], [40.0]])  # one client far off
        >>> ones = torch.ones(5, dtype=torch.float64)
        >>> updates = ShardedRound(0, [0, 1, 2, 3, 4], deltas, ones, ones, ones, 0 * ones, {}, lambda t, op: t)
        >>> strategy = Krum(num_byzantine=1)
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=5))
        >>> strategy.aggregate_shard(torch.zeros(1), updates)  # the first of the two closest to their neighbours
        tensor([1.])
        >>> strict = Krum(num_byzantine=2)
        >>> strict.setup(ServerContext(torch.zeros(1), num_clients=5))
        >>> strict.aggregate_shard(torch.zeros(1), updates)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: Krum needs more than 2f + 2 = 6 clients in a round ...
    """

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
    m = 1 is Krum, m = n averages every delta).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.MultiKrum
      init_args: {num_byzantine: 6, m: null}
    ```

    Examples:
        How many of a round's 10 clients are averaged:

        >>> from lightfed.strategies import MultiKrum
        >>> MultiKrum(num_byzantine=2).kept(10), MultiKrum(num_byzantine=2, m=3).kept(10)
        (8, 3)
        >>> MultiKrum(m=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: strategy.m must be >= 1 or null, got 0
    """

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
