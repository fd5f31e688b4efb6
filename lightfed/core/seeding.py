"""Random streams derived from (seed, purpose, round, client), never from a global RNG; the purposes are
``lightfed.streams.Stream``."""

import numpy as np

from lightfed.streams import Stream


def derived_rng(seed: int, *key: int) -> np.random.Generator:
    """A numpy generator for the stream ``key`` of ``seed``; the same on every process."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def derived_seed(seed: int, *key: int) -> int:
    """A 63-bit integer seed for the stream ``key`` of ``seed``."""
    return int(np.random.SeedSequence(seed, spawn_key=key).generate_state(1, np.uint64)[0] >> np.uint64(1))


def sample_clients(seed: int, round: int, num_clients: int, clients_per_round: int) -> list[int]:
    """The sorted ids of the clients that take part in ``round``."""
    chosen = derived_rng(seed, Stream.SAMPLING, round).choice(num_clients, size=clients_per_round, replace=False)
    return sorted(int(c) for c in chosen)
