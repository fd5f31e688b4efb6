"""Coordinate shards: each process owns a contiguous slice of the d coordinates of every client's vectors."""

import math

import torch
import torch.distributed as dist
from lightning.fabric import Fabric
from torch import Tensor


class CoordinateShards:
    """Splits d coordinates into ``world`` contiguous slices of ceil(d / world) (the last ones shorter or empty)."""

    def __init__(self, size: int, world: int, rank: int = 0) -> None:
        self.size, self.world, self.rank = size, world, rank
        self.chunk = math.ceil(size / world)
        self.bounds = [(min(p * self.chunk, size), min((p + 1) * self.chunk, size)) for p in range(world)]
        self.local = slice(*self.bounds[rank])

    def pieces(self, wanted: slice) -> list[tuple[int, slice]]:
        """(process, slice of that process's shard) for the shards that together cover the coordinates ``wanted``."""
        return [
            (rank, slice(max(start, wanted.start) - start, min(stop, wanted.stop) - start))
            for rank, (start, stop) in enumerate(self.bounds)
            if max(start, wanted.start) < min(stop, wanted.stop)
        ]

    @property
    def lengths(self) -> list[int]:
        return [stop - start for start, stop in self.bounds]

    def exchange(self, rows: Tensor, counts: list[int]) -> Tensor:
        """From this process's ``rows`` (its clients' whole vectors, ``[counts[rank], d]``) to this process's slice of
        every process's rows (``[sum(counts), len(local)]``, process 0's rows first): one all-to-all."""
        if self.world == 1:
            return rows
        send = torch.cat([rows[:, start:stop].reshape(-1) for start, stop in self.bounds])
        received = torch.empty(sum(counts) * self.lengths[self.rank], dtype=rows.dtype, device=rows.device)
        dist.all_to_all_single(
            received, send, [n * self.lengths[self.rank] for n in counts], [counts[self.rank] * n for n in self.lengths]
        )
        return received.reshape(sum(counts), self.lengths[self.rank])

    def gather(self, fabric: Fabric, shard: Tensor) -> Tensor:
        """The whole vector from every process's slice of it (the same on every process)."""
        if self.world == 1:
            return shard
        padded = torch.zeros(self.chunk, dtype=shard.dtype, device=shard.device)
        padded[: shard.numel()] = shard
        return fabric.all_gather(padded).reshape(-1)[: self.size]
