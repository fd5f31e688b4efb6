"""The masks of secure aggregation (Bonawitz et al. 2017; SecAgg+, Bell et al. 2020), simulated: every seed comes
from the run's seed, so that every process derives the same masks (what key agreement and secret sharing give the
protocol's parties)."""

import math

import torch
from torch import Tensor

from lightfed.core.seeding import derived_rng, derived_seed
from lightfed.streams import SecureAggregationKey, Stream


def neighbour_graph(cohort: list[int], degree: int | None, seed: int, round: int) -> dict[int, list[int]]:
    """Whom each client of ``cohort`` shares a pairwise mask with: every other client (SecAgg), or with ``degree``
    (even) the SecAgg+ graph: the cohort in a random order on a ring, each client joined to the degree / 2 nearest on
    either side (a random Harary graph, Bell et al. 2020)."""
    if degree is None or degree >= len(cohort) - 1:
        return {u: [v for v in cohort if v != u] for u in cohort}
    order = [
        cohort[i]
        for i in derived_rng(seed, Stream.SECURE_AGGREGATION, SecureAggregationKey.GRAPH, round).permutation(
            len(cohort)
        )
    ]
    n, half = len(order), degree // 2
    return {order[i]: sorted(order[(i + j) % n] for j in range(-half, half + 1) if j) for i in range(n)}


def dropped_clients(cohort: list[int], fraction: float, seed: int, round: int) -> set[int]:
    """floor(fraction x |cohort|) clients of the cohort, drawn from (seed, round), that drop out after the masks are
    agreed and before sending their masked input."""
    count = math.floor(fraction * len(cohort))
    rng = derived_rng(seed, Stream.SECURE_AGGREGATION, SecureAggregationKey.DROPOUT, round)
    return {cohort[i] for i in rng.choice(len(cohort), size=count, replace=False)}


def _prg(seed: int, size: int, modulus_bits: int) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2**modulus_bits, (size,), generator=generator, dtype=torch.int64)


def pair_mask(seed: int, round: int, u: int, v: int, size: int, modulus_bits: int) -> Tensor:
    """PRG(s_uv): the mask clients ``u`` and ``v`` agree on, the same for both."""
    return _prg(
        derived_seed(seed, Stream.SECURE_AGGREGATION, SecureAggregationKey.PAIR, round, min(u, v), max(u, v)),
        size,
        modulus_bits,
    )


def self_mask(seed: int, round: int, u: int, size: int, modulus_bits: int) -> Tensor:
    """PRG(b_u): client ``u``'s own mask, which the server removes only for clients whose input arrived."""
    return _prg(derived_seed(seed, Stream.SECURE_AGGREGATION, SecureAggregationKey.SELF, round, u), size, modulus_bits)


def masked_input(quantized: Tensor, u: int, neighbours: list[int], seed: int, round: int, modulus_bits: int) -> Tensor:
    """y_u = x_u + PRG(b_u) + sum_{v > u} PRG(s_uv) - sum_{v < u} PRG(s_uv) (mod 2^k): what client ``u`` sends."""
    size, modulus = quantized.numel(), 2**modulus_bits
    masked = (quantized.cpu() + self_mask(seed, round, u, size, modulus_bits)).remainder_(modulus)
    for v in neighbours:
        mask = pair_mask(seed, round, u, v, size, modulus_bits)
        masked.add_(mask if u < v else -mask).remainder_(modulus)
    return masked.to(quantized.device)


def unmasking(
    survivors: list[int],
    dropped: set[int],
    graph: dict[int, list[int]],
    seed: int,
    round: int,
    size: int,
    modulus_bits: int,
) -> Tensor:
    """What the server subtracts (mod 2^k) from the sum of the survivors' masked inputs: their self masks (b_u
    reconstructed from the survivors' shares) and their pair masks with dropped neighbours (s_uv from the dropped
    client's reconstructed key)."""
    modulus = 2**modulus_bits
    total = torch.zeros(size, dtype=torch.int64)
    for u in survivors:
        total.add_(self_mask(seed, round, u, size, modulus_bits)).remainder_(modulus)
        for v in graph[u]:
            if v in dropped:
                mask = pair_mask(seed, round, u, v, size, modulus_bits)
                total.add_(mask if u < v else -mask).remainder_(modulus)
    return total


def unrecoverable(dropped: set[int], graph: dict[int, list[int]], threshold: float) -> list[int]:
    """The clients whose secrets (a survivor's b_u, a dropped client's key) fewer than ceil(threshold x neighbours)
    surviving neighbours hold shares of: the protocol cannot unmask the round."""
    return [
        u
        for u, neighbours in graph.items()
        if sum(v not in dropped for v in neighbours) < math.ceil(threshold * len(neighbours))
    ]
