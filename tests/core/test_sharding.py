"""Coordinate shards of whole blocks, and sums over the coordinates that are the same bits however they are sharded."""

import random

import pytest
import torch

from lightfed.core.sharding import CoordinateShards, CoordinateSums, block_size, sum_rows


def test_block_size_by_hand():
    assert [block_size(d) for d in (0, 10, 2047, 2048, 29_066, 9_200_000, 10**9)] == [1, 1, 1, 2, 16, 8192, 16384]


@pytest.mark.parametrize("size", [10, 2047, 29_066, 5_000_003])
@pytest.mark.parametrize("world", [1, 2, 3, 7])
def test_shards_are_whole_blocks_within_a_block_of_an_even_split(size, world):
    block, shards = block_size(size), CoordinateShards(size, world)
    assert shards.bounds[0][0] == 0 and shards.bounds[-1][1] == size
    assert all(stop == start for (_, stop), (start, _) in zip(shards.bounds, shards.bounds[1:], strict=False))
    assert all(start % block == 0 for start, _ in shards.bounds)
    assert max(shards.lengths) - size / world < block


def _split_sums(rows: torch.Tensor, cuts: list[int], squares: bool) -> list[torch.Tensor]:
    """Every shard's result of ``CoordinateSums`` when ``rows``' coordinates are split at ``cuts``; the all-reduce
    stands in for processes: a first pass records each shard's zero-padded block sums, a second returns their sum."""
    size, recorded = rows.shape[-1], []
    bounds = list(zip([0, *cuts], [*cuts, size], strict=False))

    def run(all_reduce) -> list[torch.Tensor]:
        sums = [CoordinateSums(size, slice(start, stop), all_reduce) for start, stop in bounds]
        reduce = [s.squares if squares else s.sums for s in sums]
        return [f(rows[..., start:stop]) for f, (start, stop) in zip(reduce, bounds, strict=False)]

    run(lambda padded, op: recorded.append(padded.clone()) or padded)
    total = torch.stack(recorded).sum(0)
    return run(lambda padded, op: total.clone())


def _splits(size: int, seed: int) -> list[list[int]]:
    """CoordinateShards' splits for 1 to 8 processes, and random splits into 2 to 6 shards at block boundaries."""
    block, rng = block_size(size), random.Random(seed)
    splits = [[start for start, _ in CoordinateShards(size, world).bounds[1:]] for world in range(1, 9)]
    blocks = -(-size // block)
    return splits + [[i * block for i in sorted(rng.sample(range(1, blocks), k - 1))] for k in range(2, 7)]


@pytest.mark.parametrize("shape", [(5003,), (3, 5003), (4, 29_066), (10, 29_066)])
def test_any_split_gives_the_same_bits_as_one_shard_and_the_float64_sums(shape):
    rows = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) + 0.3
    reference = rows.double()
    for squares, expected in ((True, reference.square().sum()), (False, reference.sum())):
        (whole,) = _split_sums(rows, [], squares)
        assert whole.dtype == torch.float64
        assert abs(float(whole[0]) - float(expected)) <= 1e-6 * float(reference.abs().pow(1 + squares).sum())
        for cuts in _splits(shape[-1], seed=len(shape)):
            assert all(torch.equal(result, whole) for result in _split_sums(rows, cuts, squares)), cuts


@pytest.mark.parametrize("rows", [1, 4, 8, 10, 33])
def test_the_rows_sum_of_any_split_of_the_columns_is_the_columns_of_the_whole(rows):
    """torch's sum over 8 rows or more is not (``sum(0)`` of a slice differs from the whole's columns by an ulp)."""
    matrix = torch.randn(rows, 29_066, generator=torch.Generator().manual_seed(rows))
    whole = sum_rows(matrix)
    bound = rows * torch.finfo(torch.float32).eps * matrix.double().abs().sum(0)  # sequential rounding
    assert ((whole.double() - matrix.double().sum(0)).abs() <= bound).all()
    for cuts in _splits(29_066, seed=rows):
        bounds = [0, *cuts, 29_066]
        pieces = [sum_rows(matrix[:, start:stop].contiguous()) for start, stop in zip(bounds, bounds[1:], strict=False)]
        assert torch.equal(torch.cat(pieces), whole), cuts
    out = torch.empty(29_066)
    assert sum_rows(matrix, out=out) is out and torch.equal(out, whole)
    assert torch.equal(sum_rows(matrix[:0]), torch.zeros(29_066))


def test_several_tensors_at_once_and_empty_shards():
    x, y = torch.randn(10, generator=torch.Generator().manual_seed(1)), torch.randn(2, 10)
    shards = CoordinateShards(10, 16)  # 10 shards of one coordinate, 6 empty
    recorded = []
    for start, stop in shards.bounds:
        CoordinateSums(10, slice(start, stop), lambda p, op: recorded.append(p) or p).squares(
            x[start:stop], y[:, start:stop]
        )
    total = torch.stack(recorded).sum(0).sum(1)
    torch.testing.assert_close(total, torch.stack([x.double().square().sum(), y.double().square().sum()]))


def test_a_shard_that_cuts_a_block_is_refused():
    with pytest.raises(ValueError, match="cuts a block of 16"):
        CoordinateSums(29_066, slice(100, 200))


def test_blocks_of_2_to_the_14_are_summed_alone_on_two_threads():
    """A block as long as torch's CPU grain size would be split between threads when it is a shard's only block."""
    size = 2**24 + 5  # blocks of 2^14
    rows = torch.rand(size, generator=torch.Generator().manual_seed(2))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        (whole,) = _split_sums(rows, [], squares=True)
        for cuts in ([2**14], [2**14, 2**15], [size - 5 - 2**14], [2**23, 2**23 + 2**14]):
            assert all(torch.equal(result, whole) for result in _split_sums(rows, cuts, squares=True)), cuts
    finally:
        torch.set_num_threads(threads)
