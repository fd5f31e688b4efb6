"""Held-out shares of the training examples: the server's validation split and each client's own held-out share."""

from collections.abc import Sequence

import numpy as np

from lightfed.data.client_groups import ClientGroups, offsets_of
from lightfed.errors import ConfigError

HOLDOUT_DRAWS = ("per_client", "vectorized")  # how split_each draws (data.holdout_draws)


def check_fraction(key: str, fraction: float) -> None:
    if not 0.0 <= fraction < 1.0:
        raise ConfigError(f"data.{key} must be >= 0 and < 1, got {fraction}")


def held_count(size: int, fraction: float) -> int:
    """How many of ``size`` examples a ``fraction`` holds out: round(fraction x size), at least one and never all
    (none when ``fraction`` is 0)."""
    return int(held_counts(np.asarray(size), fraction))


def held_counts(sizes: np.ndarray, fraction: float) -> np.ndarray:
    """``held_count`` of each of ``sizes`` (numpy rounds half to even, as Python's ``round``)."""
    rounded = np.maximum(1, np.round(fraction * sizes).astype(np.int64))
    return np.where((fraction == 0) | (sizes < 2), 0, np.minimum(sizes - 1, rounded))


def held_out(size: int, count: int, rng: np.random.Generator, *strata: np.ndarray | None) -> np.ndarray:
    """Sorted positions of ``count`` of ``size`` examples, evenly spaced over the examples shuffled and then grouped by
    ``strata`` (e.g. natural client ids, then labels; None: not known): each group gives within one example of its
    share."""
    order = rng.permutation(size)
    keys = [np.asarray(key)[order] for key in reversed(strata) if key is not None]
    if keys:
        order = order[np.lexsort(keys)]  # stable: the shuffled order within a group
    return np.sort(order[evenly_spaced(np.arange(count), size, count)])


def evenly_spaced(j: np.ndarray, size: np.ndarray | int, count: np.ndarray | int) -> np.ndarray:
    """The positions of picks ``j`` of ``count`` evenly spaced over ``size`` items: (j + 1/2) size / count."""
    return ((j + 0.5) * size / count).astype(np.int64)


def split_each(
    groups: Sequence[np.ndarray],
    fraction: float,
    rng: np.random.Generator,
    strata: np.ndarray | None = None,
    draws: str = "per_client",
) -> tuple[ClientGroups[np.ndarray], ClientGroups[np.ndarray]]:
    """Each group of example indices split into (kept, held out): ``held_count`` of it, stratified by ``strata``
    (labels, indexed by example; None: not known), each in the group's order.

    ``draws``: ``per_client`` shuffles group after group (``held_out``); ``vectorized`` gives every example of every
    group one random key and sorts them all at once (by group, stratum, key), then picks as ``held_out`` does: the same
    distribution, other draws."""
    if draws == "per_client":
        kept, held = [], []
        for group in groups:
            group = np.asarray(group, dtype=np.int64)
            picks = held_out(
                len(group), held_count(len(group), fraction), rng, None if strata is None else strata[group]
            )
            held.append(group[picks])
            kept.append(np.delete(group, picks))
        return ClientGroups.of(kept), ClientGroups.of(held)
    all_groups = ClientGroups.of(groups)
    flat, sizes = all_groups.flat, all_groups.sizes
    counts = held_counts(sizes, fraction)
    group_of = np.repeat(np.arange(len(sizes)), sizes)
    keys = [rng.random(len(flat)), *([] if strata is None else [strata[flat]]), group_of]
    order = np.lexsort(keys)  # by group, then stratum, then the random key
    pick_group = np.repeat(np.arange(len(sizes)), counts)
    j = np.arange(counts.sum()) - np.repeat(offsets_of(counts)[:-1], counts)  # a pick's number within its group
    is_held = np.zeros(len(flat), dtype=bool)
    is_held[order[all_groups.offsets[pick_group] + evenly_spaced(j, sizes[pick_group], counts[pick_group])]] = True
    return (
        ClientGroups(flat[~is_held], offsets_of(sizes - counts)),
        ClientGroups(flat[is_held], offsets_of(counts)),
    )
