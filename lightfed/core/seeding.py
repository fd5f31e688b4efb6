"""Random streams derived from (seed, purpose, round, client), never from a global RNG; the purposes are
``lightfed.streams.Stream``."""

from collections.abc import Sequence
from typing import Any

import numpy as np

from lightfed.streams import Stream

# numpy's SeedSequence hash (O'Neill's seed_seq_fe): its constants, for ``derived_seeds``
INIT_A, MULT_A, INIT_B, MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
MIX_MULT_L, MIX_MULT_R, MASK, POOL = 0xCA01F9DD, 0x4973F715, 0xFFFFFFFF, 4
TOGETHER_FROM = 8  # seeds from which derived_seeds computes them on arrays


def derived_rng(seed: int, *key: int) -> np.random.Generator:
    """A numpy generator for the stream ``key`` of ``seed``; the same on every process."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def derived_seed(seed: int, *key: int) -> int:
    """A 63-bit integer seed for the stream ``key`` of ``seed``."""
    return int(np.random.SeedSequence(seed, spawn_key=key).generate_state(1, np.uint64)[0] >> np.uint64(1))


def derived_seeds(seed: int, *key: int, last: Sequence[int]) -> list[int]:
    """``derived_seed(seed, *key, k)`` for every ``k`` in ``last``, computed together: numpy's ``SeedSequence`` hash
    (``mix_entropy``, then ``generate_state``), the part every ``k`` shares once on Python integers, the rest on arrays
    of 32-bit words held in uint64 (a ``SeedSequence`` per client took a twentieth of a round of many tiny clients).
    Fewer than ``TOGETHER_FROM`` seeds, or words of 32 bits or more, take numpy's own, one at a time."""
    if len(last) < TOGETHER_FROM or any(not 0 <= word <= MASK for word in (seed, *key, *last)):
        return [derived_seed(seed, *key, k) for k in last]
    hashmix = _HashMix()
    pool = [hashmix(word) for word in (seed, *[0] * (POOL - 1))]  # the seed padded to the pool's size
    for source in range(POOL):
        for target in range(POOL):
            if source != target:
                pool[target] = _mix(pool[target], hashmix(pool[source]))
    words = np.asarray(last, np.uint64)  # below 2**32: every product below 2**64
    for word in (*key, words):
        for target in range(POOL):
            pool[target] = _mix(pool[target], hashmix(word))
    const, state = INIT_B, []
    for word in pool[:2]:  # generate_state(1, np.uint64): two 32-bit words, the low one first
        value = word ^ const
        const = const * MULT_B & MASK
        value = value * const & MASK
        state.append(value ^ (value >> 16))
    return ((state[1] << 32 | state[0]) >> 1).tolist()


class _HashMix:
    """``SeedSequence``'s hashmix of a Python integer or an array; its constant moves on at each call."""

    def __init__(self) -> None:
        self.const = INIT_A

    def __call__(self, value: Any) -> Any:
        value = value ^ self.const
        self.const = self.const * MULT_A & MASK
        value = value * self.const & MASK
        return value ^ (value >> 16)


def _mix(x: Any, y: Any) -> Any:
    result = (MIX_MULT_L * x - MIX_MULT_R * y) & MASK
    return result ^ (result >> 16)


def sample_clients(seed: int, round: int, num_clients: int, clients_per_round: int) -> list[int]:
    """The sorted ids of the clients that take part in ``round``."""
    chosen = derived_rng(seed, Stream.SAMPLING, round).choice(num_clients, size=clients_per_round, replace=False)
    return sorted(int(c) for c in chosen)


def sample_available_clients(seed: int, round: int, available: Sequence[int], count: int) -> list[int]:
    """The sorted ids of ``min(count, len(available))`` clients drawn without replacement from ``available`` (given
    in increasing id order) for ``round``, from the same stream as ``sample_clients``."""
    size = min(count, len(available))
    chosen = derived_rng(seed, Stream.SAMPLING, round).choice(len(available), size=size, replace=False)
    return sorted(int(available[c]) for c in chosen)
