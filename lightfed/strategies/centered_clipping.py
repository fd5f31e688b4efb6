"""Centered clipping (Karimireddy, He and Jaggi, ICML 2021): the deltas' differences from a center, clipped in L2 and
averaged, move the center; the center is the previous round's aggregate."""

import torch
from torch import Tensor

from lightfed.core.sharding import sum_rows
from lightfed.errors import ConfigError
from lightfed.strategies.base import ServerContext
from lightfed.strategies.pairwise_distances import ShardedDistances
from lightfed.strategies.sharded_base import ShardedRound, ShardedStrategy


class CenteredClipping(ShardedStrategy):
    """v <- v + (1/n) sum_i (delta_i - v) min(1, tau / ||delta_i - v||), ``iterations`` times from v = the previous
    round's aggregate (zero before the first), then x <- x + server_lr * v. The norms come from the coordinate shards
    (one all-reduce of per-client partial sums per iteration); v is kept sharded (saved per process).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.CenteredClipping
      init_args: {tau: 1.0, iterations: 1}
    ```

    Examples:
        From the center 0, every delta is clipped to length 1 before the mean:

        >>> import torch
        >>> from lightfed.strategies import CenteredClipping, ServerContext, ShardedRound
        >>> deltas = torch.tensor([[1.0], [1.2], [0.9], [1.1], [40.0]])  # one client far off
        >>> ones = torch.ones(5, dtype=torch.float64)
        >>> updates = ShardedRound(0, [0, 1, 2, 3, 4], deltas, ones, ones, ones, 0 * ones, {}, lambda t, op: t)
        >>> strategy = CenteredClipping(tau=1.0)
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=5))
        >>> strategy.aggregate_shard(torch.zeros(1), updates)  # (1 + 1 + 0.9 + 1 + 1) / 5
        tensor([0.9800])
    """

    def __init__(self, tau: float = 1.0, iterations: int = 1, server_lr: float = 1.0) -> None:
        """
        Args:
            tau: Clipping radius of a delta's difference from the center.
            iterations: Clipping iterations a round (the paper's l; 1 suffices with the previous aggregate as center).
            server_lr: Server step size on the aggregate.
        """
        if not tau > 0:
            raise ConfigError(f"strategy.tau must be > 0, got {tau}")
        if iterations < 1:
            raise ConfigError(f"strategy.iterations must be >= 1, got {iterations}")
        self.tau, self.iterations, self.server_lr = tau, iterations, server_lr

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        self.center = torch.zeros_like(context.params[self.shard])

    def aggregate_shard(self, params: Tensor, updates: ShardedRound) -> Tensor:
        distances = ShardedDistances(self.num_params, self.shard, updates.all_reduce)
        for _ in range(self.iterations):
            differences = updates.deltas - self.center
            norms = distances.squared_norms(differences).sqrt()
            scales = (self.tau / norms).clamp(max=1.0)
            self.center += (sum_rows(scales[:, None] * differences.double()) / len(differences)).to(self.center.dtype)
        return params + self.server_lr * self.center

    def sharded_state(self) -> dict[str, Tensor]:
        return {"center": self.center}
