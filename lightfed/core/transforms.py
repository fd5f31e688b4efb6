"""Transforms: the stages an update goes through between a client's training and the strategy, as one flat list.

Each transform has a client half, ``contribution`` (the update a client sends, given the round), and a server half,
``recovered`` (what the server reads of the round's reduced sums: the transform's own entries). A ``Pipeline`` runs
the client halves in the listed order, each on the previous one's output, and the server halves in reverse order; no
transform sees another. The strategy (its server path: sums, asynchronous or coordinate shards) takes what the last
transform gives, so a transform stands in front of any strategy (norm bounding in front of Krum).
"""

from collections.abc import Mapping, Sequence

from torch import Tensor

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError


class Transform:
    """One stage of the pipeline; the base changes nothing."""

    def sum_sizes(self) -> dict[str, int]:
        """The sums its client half adds into (name: length), reduced over every process with the round's own."""
        return {}

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate:
        """What the client sends instead of ``update`` in round ``round`` (0-based); may add into its ``sums``."""
        return update

    def recovered(self, sums: Mapping[str, Tensor], round: int) -> None:
        """Reads its entries of the round's reduced ``sums``."""

    def metrics(self) -> dict[str, float]:
        """Scalars to log after the round, under ``<the transform's name>/``."""
        return {}


class Pipeline:
    """The run's transforms in order (none: updates go to the strategy as trained)."""

    def __init__(self, transforms: Sequence[Transform] = ()) -> None:
        """Raises ``ConfigError`` when two transforms add into the same sums."""
        self.transforms = list(transforms)
        sizes: dict[str, int] = {}
        for transform in self.transforms:
            clash = sorted(set(sizes) & set(transform.sum_sizes()))
            if clash:
                raise ConfigError(
                    f"transforms: {type(transform).__name__} adds into sums another one adds into: {clash}"
                )
            sizes.update(transform.sum_sizes())
        self.sizes = sizes

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate:
        """The client halves in order."""
        for transform in self.transforms:
            update = transform.contribution(update, round, sums)
        return update

    def recovered(self, sums: Mapping[str, Tensor], round: int) -> dict[str, float]:
        """The server halves in reverse order; returns their metrics, each under its transform's name."""
        for transform in reversed(self.transforms):
            transform.recovered(sums, round)
        return {f"{_name(t)}/{key}": value for t in self.transforms for key, value in t.metrics().items()}


def _name(transform: Transform) -> str:
    """``NormBounding`` -> ``norm_bounding``."""
    name = type(transform).__name__
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))
