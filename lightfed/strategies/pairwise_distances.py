"""Squared L2 norms and pairwise distances of row vectors sharded by coordinate: each process adds up its own
coordinates per block, and one all-reduce of the block sums gives every process the whole numbers, the same bits on
any number of processes (as ``lightfed.core.sharding.CoordinateSums``, one number per row or pair of rows)."""

import torch
from torch import Tensor

from lightfed.core.sharding import AllReduce, CoordinateSums, local


class ShardedDistances:
    """Norms and distances of rows whose coordinates ``shard`` of ``size`` this process holds (memory per process
    ~ rows x len(shard) + pairs x d / block size)."""

    def __init__(self, size: int, shard: slice = slice(None), all_reduce: AllReduce = local) -> None:
        self.sums = CoordinateSums(size, shard, all_reduce)

    def squared_norms(self, rows: Tensor) -> Tensor:
        """||rows[i]||^2 over every process's coordinates, float64 ``[rows]``: one all-reduce."""
        return self.sums.rows_total(self.sums.row_blocks(rows, squares=True))

    def pairwise(self, rows: Tensor) -> Tensor:
        """||rows[i] - rows[j]||^2, a symmetric float64 ``[rows, rows]`` matrix with a zero diagonal: one all-reduce
        of the per-pair block sums (one row's differences with the later rows in memory at a time)."""
        count = len(rows)
        upper = torch.triu_indices(count, count, offset=1, device=rows.device)
        parts = [self.sums.row_blocks(rows[i + 1 :] - rows[i], squares=True) for i in range(count)]
        distances = torch.zeros(count, count, dtype=torch.float64, device=rows.device)
        if upper.shape[1]:
            distances[upper[0], upper[1]] = self.sums.rows_total(torch.cat(parts))
        return distances + distances.T
