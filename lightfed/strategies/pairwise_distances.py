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
        return self._reduce(self._block_squares(rows))

    def pairwise(self, rows: Tensor) -> Tensor:
        """||rows[i] - rows[j]||^2, a symmetric float64 ``[rows, rows]`` matrix with a zero diagonal: one all-reduce
        of the per-pair block sums (one row's differences with the later rows in memory at a time)."""
        count = len(rows)
        upper = torch.triu_indices(count, count, offset=1, device=rows.device)
        parts = [self._block_squares(rows[i + 1 :] - rows[i]) for i in range(count)]
        distances = torch.zeros(count, count, dtype=torch.float64, device=rows.device)
        if upper.shape[1]:
            distances[upper[0], upper[1]] = self._reduce(torch.cat(parts))
        return distances + distances.T

    def _block_squares(self, rows: Tensor) -> Tensor:
        """``[rows, this shard's blocks]``: each row's sum of squares within each block, in the rows' dtype, then
        float64 (the blocks as ``CoordinateSums`` cuts them)."""
        block = self.sums.block
        whole = rows.shape[-1] // block * block
        parts = [rows[:, :whole].unflatten(1, (-1, block))]
        if whole < rows.shape[-1]:  # the vector's last block, shorter
            parts.append(rows[:, whole:].unsqueeze(1))
        return torch.cat([torch.linalg.vector_norm(part, dim=-1) for part in parts], 1).double().square_()

    def _reduce(self, blocks: Tensor) -> Tensor:
        """Per row of ``blocks``, every process's block sums (one all-reduce of a zero-padded matrix), added in block
        order."""
        sums = self.sums
        padded = torch.zeros(len(blocks), sums.blocks, dtype=torch.float64, device=blocks.device)
        padded[:, sums.first : sums.first + blocks.shape[1]] = blocks
        return sums.all_reduce(padded, "sum").sum(1)
