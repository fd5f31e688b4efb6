"""Robust federated aggregation, RFA (Pillutla, Kakade and Harchaoui, IEEE TSP 2022): the weighted geometric median of
the client deltas by the smoothed Weiszfeld algorithm."""

import math

from torch import Tensor

from lightfed.core.sharding import sum_rows
from lightfed.errors import ConfigError
from lightfed.strategies.pairwise_distances import ShardedDistances
from lightfed.strategies.sharded_base import ShardedRound, ShardedStrategy


def weighted_mean(rows: Tensor, weights: Tensor) -> Tensor:
    """sum_i weights_i rows_i / sum_i weights_i, per coordinate in float64 (``sum_rows``: the same bits for any shard)."""
    return (sum_rows(weights[:, None] * rows.double()) / weights.sum()).to(rows.dtype)


class GeometricMedian(ShardedStrategy):
    """x <- x + server_lr * z, z approximately minimizing sum_i alpha_i ||z - delta_i|| (alpha_i: the client's
    examples, or 1 each). From the weighted mean, each smoothed Weiszfeld iteration sets
    z <- sum_i beta_i delta_i / sum_i beta_i with beta_i = alpha_i / max(nu, ||z - delta_i||), until the objective
    changes by less than ``ftol`` times itself or after ``max_iterations``. The norms ||z - delta_i|| come from the
    coordinate shards: one all-reduce of per-client partial sums per iteration. Logs the iterations taken.

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.GeometricMedian
      init_args: {max_iterations: 4, weighted: true}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.strategies import GeometricMedian, ServerContext, ShardedRound
        >>> deltas = torch.tensor([[1.0], [1.2], [0.9], [1.1], [40.0]])  # one client far off
        >>> ones = torch.ones(5, dtype=torch.float64)
        >>> updates = ShardedRound(0, [0, 1, 2, 3, 4], deltas, ones, ones, ones, 0 * ones, {}, lambda t, op: t)
        >>> strategy = GeometricMedian(max_iterations=30)
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=5))
        >>> strategy.aggregate_shard(torch.zeros(1), updates)  # in one dimension, the median
        tensor([1.1000])
        >>> strategy.metrics()
        {'weiszfeld_iterations': 11.0}
    """

    def __init__(
        self,
        max_iterations: int = 4,
        nu: float = 1e-6,
        ftol: float = 1e-6,
        weighted: bool = True,
        server_lr: float = 1.0,
    ) -> None:
        """
        Args:
            max_iterations: Most Weiszfeld iterations a round.
            nu: Smoothing: a distance below nu counts as nu (RFA's nu > 0).
            ftol: Stop when the objective changes by less than ftol times its value.
            weighted: alpha_i = the client's examples (RFA); false: 1 each.
            server_lr: Server step size on the aggregate.
        """
        if max_iterations < 1:
            raise ConfigError(f"strategy.max_iterations must be >= 1, got {max_iterations}")
        if not nu > 0:
            raise ConfigError(f"strategy.nu must be > 0, got {nu}")
        self.max_iterations, self.nu, self.ftol, self.weighted, self.server_lr = (
            max_iterations,
            nu,
            ftol,
            weighted,
            server_lr,
        )
        self.iterations = 0

    def geometric_median(self, deltas: Tensor, alphas: Tensor, distances: ShardedDistances) -> Tensor:
        """This process's slice of the smoothed Weiszfeld estimate (``alphas``: float64 weights, whole)."""
        median, previous, self.iterations = weighted_mean(deltas, alphas), math.inf, 0
        while self.iterations < self.max_iterations:
            norms = distances.squared_norms(deltas - median).sqrt()
            objective = float((alphas * norms).sum())
            if abs(previous - objective) < self.ftol * objective:
                break
            median, previous = weighted_mean(deltas, alphas / norms.clamp(min=self.nu)), objective
            self.iterations += 1
        return median

    def aggregate_shard(self, params: Tensor, updates: ShardedRound) -> Tensor:
        alphas = updates.num_examples if self.weighted else updates.num_examples.new_ones(len(updates.client_ids))
        distances = ShardedDistances(self.num_params, self.shard, updates.all_reduce)
        return params + self.server_lr * self.geometric_median(updates.deltas, alphas, distances)

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "weiszfeld_iterations": float(self.iterations)}
