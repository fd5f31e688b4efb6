"""Bulyan (El Mhamdi et al., ICML 2018): theta = n - 2f deltas picked one by one by Krum, then per coordinate the mean
of the beta = theta - 2f picked values closest to their median."""

import torch
from torch import Tensor

from lightfed.core.sharding import sum_rows
from lightfed.errors import ConfigError
from lightfed.strategies.krum import Krum, krum_scores
from lightfed.strategies.pairwise_distances import ShardedDistances
from lightfed.strategies.robust import trimmed_mean
from lightfed.strategies.sharded_base import ShardedRound


def bulyan_selection(distances: Tensor, num_byzantine: int) -> list[int]:
    """The n - 2f rows Krum picks one at a time, each from the rows not yet picked, scored among those by their
    max(1, n' - f - 2) nearest (n' rows left: the last picks have fewer than Krum's n' - f - 2 neighbours)."""
    remaining, picked = list(range(len(distances))), []
    for _ in range(len(distances) - 2 * num_byzantine):
        scores = krum_scores(distances[remaining][:, remaining], max(1, len(remaining) - num_byzantine - 2))
        best = remaining[int(torch.argsort(scores, stable=True)[0])]
        picked.append(best)
        remaining.remove(best)
    return picked


def closest_to_median_mean(values: Tensor, beta: int) -> Tensor:
    """Per coordinate (column), the mean of the ``beta`` values closest to the column's median (ties to the lower
    row), summed in float64."""
    median = trimmed_mean(values, (len(values) - 1) // 2)
    rows = (values - median).abs().argsort(dim=0, stable=True)[:beta]
    return (sum_rows(values.gather(0, rows).double()) / len(rows)).to(values.dtype)


class Bulyan(Krum):
    """x <- x + server_lr * Bulyan's aggregate of the round's deltas, tolerating ``num_byzantine`` Byzantine clients
    (a round needs at least 4f + 3; Krum's settings). Krum's distances come from the coordinate shards (one all-reduce); the
    coordinate-wise step needs only this process's slice.

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.Bulyan
      init_args: {num_byzantine: 4}
    ```

    Examples:
        Seven clients, the least a round needs with one Byzantine client:

        >>> import torch
        >>> from lightfed.strategies import Bulyan, ServerContext, ShardedRound
        >>> deltas = torch.tensor([[1.0], [1.2], [0.9], [1.1], [1.0], [1.05], [40.0]])  # one client far off
        >>> ones = torch.ones(7, dtype=torch.float64)
        >>> updates = ShardedRound(0, [0, 1, 2, 3, 4, 5, 6], deltas, ones, ones, ones, 0 * ones, {}, lambda t, op: t)
        >>> strategy = Bulyan(num_byzantine=1)
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=7))
        >>> strategy.aggregate_shard(torch.zeros(1), updates)
        tensor([1.0333])
    """

    def aggregate_shard(self, params: Tensor, updates: ShardedRound) -> Tensor:
        count, f = len(updates.client_ids), self.num_byzantine
        if count < 4 * f + 3:
            raise ConfigError(
                f"Bulyan needs at least 4f + 3 = {4 * f + 3} clients in a round with strategy.num_byzantine {f}, got "
                f"{count}: raise trainer.clients_per_round or lower strategy.num_byzantine"
            )
        distances = ShardedDistances(self.num_params, self.shard, updates.all_reduce).pairwise(updates.deltas)
        picked = updates.deltas[torch.tensor(bulyan_selection(distances, f), device=updates.deltas.device)]
        return params + self.server_lr * closest_to_median_mean(picked, count - 4 * f)
