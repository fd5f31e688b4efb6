"""Coordinate-wise robust aggregation (Yin et al., ICML 2018): trimmed mean and median of the client deltas."""

from torch import Tensor

from lightfed.core.sharding import sum_rows
from lightfed.errors import ConfigError
from lightfed.strategies.sharded_base import ShardedRound, ShardedStrategy


def trimmed_mean(deltas: Tensor, trim: int) -> Tensor:
    """Per coordinate, the mean of the rows left after dropping the ``trim`` smallest and ``trim`` largest values
    (summed in float64 one row at a time, ``sum_rows``, so the result does not depend on how the coordinates are
    sharded)."""
    count = deltas.shape[0]
    kept = deltas.sort(dim=0).values[trim : count - trim]
    return (sum_rows(kept.double()) / len(kept)).to(deltas.dtype)


class TrimmedMean(ShardedStrategy):
    """x <- x + server_lr * trimmed mean of the round's deltas, ``trim`` of the clients cut at each end of every
    coordinate (unweighted: a robust aggregate does not let one client's data size decide). Runs on the sharded
    server path.

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.TrimmedMean
      init_args: {trim: 0.3}
    ```

    Examples:
        Five clients, one cut at each end:

        >>> import torch
        >>> from lightfed.strategies import TrimmedMean, ServerContext, ShardedRound
        >>> deltas = torch.tensor([[1.0], [1.2], [0.9], [1.1], [40.0]])  # one client far off
        >>> ones = torch.ones(5, dtype=torch.float64)
        >>> updates = ShardedRound(0, [0, 1, 2, 3, 4], deltas, ones, ones, ones, 0 * ones, {}, lambda t, op: t)
        >>> strategy = TrimmedMean(trim=0.2)
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=5))
        >>> strategy.trimmed(5)
        1
        >>> strategy.aggregate_shard(torch.zeros(1), updates)  # the mean of 1.0, 1.1 and 1.2
        tensor([1.1000])
        >>> TrimmedMean(trim=0.5)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: strategy.trim must be in [0, 0.5), got 0.5
    """

    def __init__(self, trim: float = 0.1, server_lr: float = 1.0) -> None:
        """
        Args:
            trim: Fraction of the round's clients dropped at each end of every coordinate, in [0, 0.5).
            server_lr: Server step size on the aggregate.
        """
        if not 0 <= trim < 0.5:
            raise ConfigError(f"strategy.trim must be in [0, 0.5), got {trim}")
        self.trim, self.server_lr = trim, server_lr

    def trimmed(self, clients: int) -> int:
        """Clients dropped at each end of every coordinate in a round of ``clients``."""
        return int(self.trim * clients)

    def aggregate_shard(self, params: Tensor, updates: ShardedRound) -> Tensor:
        return params + self.server_lr * trimmed_mean(updates.deltas, self.trimmed(len(updates.client_ids)))


class CoordinateMedian(TrimmedMean):
    """x <- x + server_lr * coordinate-wise median of the round's deltas (the mean of the middle two for an even
    number of clients).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.CoordinateMedian
    ```

    Examples:
        The median trims all but the middle one or two clients:

        >>> from lightfed.strategies import CoordinateMedian
        >>> CoordinateMedian().trimmed(5), CoordinateMedian().trimmed(6)
        (2, 2)
    """

    def __init__(self, server_lr: float = 1.0) -> None:
        super().__init__(0.0, server_lr)

    def trimmed(self, clients: int) -> int:
        return (clients - 1) // 2
