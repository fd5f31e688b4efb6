"""Coordinate shards: each process owns a contiguous slice of the d coordinates of every client's vectors; sums over
all the coordinates that give the same bits on any number of processes."""

import math
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import Tensor

AllReduce = Callable[[Tensor, str], Tensor]  # (tensor, "sum" | "max") over every process's slice of the coordinates
MAX_BLOCK = 2**14  # below torch's CPU grain size (2^15): a block's reduction is never split between threads
MIN_BLOCKS = 1024


def block_size(size: int) -> int:
    """Coordinates per block of a ``size``-coordinate vector: the largest power of two <= size / 1024, between 1 and
    2^14, so that shards of whole blocks stay within 1/1024 of d of an even split."""
    return 1 << min(max((size // MIN_BLOCKS).bit_length() - 1, 0), MAX_BLOCK.bit_length() - 1)


def sum_rows(rows: Tensor, out: Tensor | None = None) -> Tensor:
    """The sum of ``rows`` over its first dimension, one row added at a time, so that every column gets the same bits
    whichever slice of the columns a process holds: torch's own sum over the rows, from 8 rows up on a CPU, adds the
    columns of its vectorised part and those of the rest in different orders (1 ulp apart in float32)."""
    total = rows.new_empty(rows.shape[1:]) if out is None else out
    if len(rows) == 0:
        return total.zero_()
    total.copy_(rows[0])
    for row in rows[1:]:
        total.add_(row)
    return total


def local(tensor: Tensor, op: str) -> Tensor:
    """The all-reduce of one process."""
    return tensor


class CoordinateShards:
    """Splits d coordinates into ``world`` contiguous slices of ceil(d / world) rounded up to whole blocks of
    ``block_size(d)`` (the last ones shorter or empty), so that a block is never cut (see ``CoordinateSums``)."""

    def __init__(self, size: int, world: int, rank: int = 0) -> None:
        self.size, self.world, self.rank = size, world, rank
        block = block_size(size)
        self.chunk = math.ceil(size / world / block) * block
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
        return torch.cat([piece.reshape(count, n) for piece, n in zip(pieces, self.lengths, strict=True)], dim=1)

    def gather(self, shard: Tensor) -> Tensor:
        """The whole vector from every process's slice of it (the same on every process)."""
        if self.world == 1:
            return shard
        padded = torch.zeros(self.chunk, dtype=shard.dtype, device=shard.device)
        padded[: shard.numel()] = shard
        whole = torch.empty(self.world * self.chunk, dtype=shard.dtype, device=shard.device)
        dist.all_gather_into_tensor(whole, padded)
        return whole[: self.size]


class CoordinateSums:
    """Sums over every coordinate of vectors sharded by ``CoordinateShards`` (this process holds ``shard`` of
    ``size``), the same bits on any number of processes: each block of ``block_size(size)`` coordinates is reduced
    alone in the vectors' dtype (on one thread, in one order), and the block sums, collected from every process by
    one all-reduce of a zero-padded float64 vector (adding zeros is exact), are added in float64 in block order."""

    def __init__(self, size: int, shard: slice = slice(None), all_reduce: AllReduce = local) -> None:
        self.size, self.block = size, block_size(size)
        self.blocks = math.ceil(size / self.block)
        start = shard.start or 0
        self.first, remainder = start // self.block, start % self.block
        if remainder:
            raise ValueError(f"a shard starting at {shard.start} cuts a block of {self.block} coordinates")
        self.all_reduce = all_reduce

    def squares(self, *tensors: Tensor) -> Tensor:
        """Per tensor (this shard's coordinates in the last dimension, any rows before it), the sum of its squares
        over every row and every process's coordinates: float64, one value per tensor."""
        return self._reduce([self._blocks(tensor, squares=True) for tensor in tensors])

    def sums(self, *tensors: Tensor) -> Tensor:
        """As ``squares``, the sums of the values."""
        return self._reduce([self._blocks(tensor, squares=False) for tensor in tensors])

    def row_blocks(self, rows: Tensor, squares: bool) -> Tensor:
        """``[rows, this shard's blocks]``: each row's sum (``squares``: of squares) within each block, in the rows'
        dtype, then float64; ``rows_total`` adds them up over every process."""
        whole = rows.shape[-1] // self.block * self.block
        parts = [rows[:, :whole].unflatten(1, (-1, self.block))]
        if whole < rows.shape[-1]:  # the vector's last block, shorter
            parts.append(rows[:, whole:].unsqueeze(1))
        reduced = [torch.linalg.vector_norm(part, dim=-1) if squares else part.sum(-1) for part in parts]
        per_block = (torch.cat(reduced, 1) if len(reduced) > 1 else reduced[0]).double()
        return per_block.square_() if squares else per_block

    def rows_total(self, blocks: Tensor) -> Tensor:
        """Per row of ``row_blocks``' (several calls' rows may be concatenated), the sum over every process's
        coordinates: one all-reduce, float64 ``[rows]``."""
        return self._reduce(blocks)

    def _blocks(self, tensor: Tensor, squares: bool) -> Tensor:
        """This shard's block sums of ``tensor``, each over its rows in row order, float64."""
        rows = torch.atleast_2d(tensor)
        per_block = self.row_blocks(rows, squares)
        return per_block[0] if len(rows) == 1 else per_block.T.contiguous().sum(1)  # one row: its own sum, exactly

    def _reduce(self, blocks: list[Tensor] | Tensor) -> Tensor:
        """Every process's block sums of each row (one all-reduce), added in block order."""
        stacked = blocks if isinstance(blocks, Tensor) else torch.stack(blocks)
        if self.first == 0 and stacked.shape[1] == self.blocks:  # every block is this shard's
            padded = stacked
        else:
            padded = torch.zeros(len(stacked), self.blocks, dtype=torch.float64, device=stacked.device)
            padded[:, self.first : self.first + stacked.shape[1]] = stacked
        return self.all_reduce(padded, "sum").sum(1)
