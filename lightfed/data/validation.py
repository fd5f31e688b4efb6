"""Held-out shares of the training examples: the server's validation split and each client's own held-out share."""

import numpy as np

from lightfed.errors import ConfigError

VALIDATION_STREAM = 1  # the held-out shares' random stream beside the partitioner's, both from the run's seed


def check_fraction(key: str, fraction: float) -> None:
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"data.{key} must be >= 0 and < 1, got {fraction}")


def held_count(size: int, fraction: float) -> int:
    """How many of ``size`` examples a ``fraction`` holds out: round(fraction x size), at least one and never all
    (none when ``fraction`` is 0)."""
    return 0 if fraction == 0 or size < 2 else min(size - 1, max(1, round(fraction * size)))


def held_out(size: int, count: int, rng: np.random.Generator, *strata: np.ndarray | None) -> np.ndarray:
    """Sorted positions of ``count`` of ``size`` examples, evenly spaced over the examples shuffled and then grouped by
    ``strata`` (e.g. natural client ids, then labels; None: not known): each group gives within one example of its
    share."""
    order = rng.permutation(size)
    keys = [np.asarray(key)[order] for key in reversed(strata) if key is not None]
    if keys:
        order = order[np.lexsort(keys)]  # stable: the shuffled order within a group
    picks = ((np.arange(count) + 0.5) * size / count).astype(np.int64) if count else np.empty(0, dtype=np.int64)
    return np.sort(order[picks])


def split_each(
    groups: list[np.ndarray], fraction: float, rng: np.random.Generator, strata: np.ndarray | None = None
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each group of example indices split into (kept, held out): ``held_count`` of it, stratified by ``strata``
    (labels, indexed by example; None: not known)."""
    kept, held = [], []
    for group in groups:
        group = np.asarray(group, dtype=np.int64)
        picks = held_out(len(group), held_count(len(group), fraction), rng, None if strata is None else strata[group])
        held.append(group[picks])
        kept.append(np.delete(group, picks))
    return kept, held
