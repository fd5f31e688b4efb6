"""Coordinate shards: each process owns a contiguous slice of the d coordinates of every client's vectors."""

import math

import torch
import torch.distributed as dist
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
        """From this process's ``rows`` (its clients' whole vectors, ``[counts[rank], ..., d]``) to this process's
        slice of every process's rows (``[sum(counts), ..., len(local)]``, process 0's rows first): one all-to-all."""
        if self.world == 1:
            return rows
        inner = rows.shape[1:-1]
        send = torch.cat([rows[..., start:stop].reshape(-1) for start, stop in self.bounds])
        width = inner.numel() * self.lengths[self.rank]
        received = torch.empty(sum(counts) * width, dtype=rows.dtype, device=rows.device)
        dist.all_to_all_single(
            received, send, [n * width for n in counts], [counts[self.rank] * inner.numel() * n for n in self.lengths]
        )
        return received.reshape(sum(counts), *inner, self.lengths[self.rank])

    def assemble(self, slices: Tensor, rows_of: list[list[int]]) -> Tensor:
        """The inverse of ``exchange``: from this process's slice of every client's vector (``[clients, len(local)]``)
        to the whole vectors of the rows ``rows_of[rank]`` this process needs (``[len(rows_of[rank]), d]``; on one process
        ``slices`` itself when those are all its rows in order)."""
        if self.world == 1:
            return slices if rows_of[0] == list(range(len(slices))) else slices[rows_of[0]]
        send = torch.cat([slices[rows].reshape(-1) for rows in rows_of])
        count = len(rows_of[self.rank])
        received = torch.empty(count * self.size, dtype=slices.dtype, device=slices.device)
        dist.all_to_all_single(
            received, send, [count * n for n in self.lengths], [len(rows) * self.lengths[self.rank] for rows in rows_of]
        )
        pieces = received.split([count * n for n in self.lengths])
        return torch.cat([piece.reshape(count, n) for piece, n in zip(pieces, self.lengths)], dim=1)

    def gather(self, shard: Tensor) -> Tensor:
        """The whole vector from every process's slice of it (the same on every process)."""
        if self.world == 1:
            return shard
        padded = torch.zeros(self.chunk, dtype=shard.dtype, device=shard.device)
        padded[: shard.numel()] = shard
        whole = torch.empty(self.world * self.chunk, dtype=shard.dtype, device=shard.device)
        dist.all_gather_into_tensor(whole, padded)
        return whole[: self.size]
