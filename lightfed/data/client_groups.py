"""Every client's example indices in one flat array: a client's indices are a slice of it, not an array of its own."""

from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

import numpy as np
import torch

Indices = TypeVar("Indices", np.ndarray, torch.Tensor)


class ClientGroups(Sequence[Indices]):
    """Groups of indices held as one flat array (numpy or torch) and offsets: group k is
    ``flat[offsets[k]:offsets[k + 1]]``, a view. A million clients cost two arrays, not a million objects."""

    def __init__(self, flat: Indices, offsets: np.ndarray) -> None:
        self.flat: Indices = flat
        self.offsets = np.asarray(offsets, dtype=np.int64)

    @classmethod
    def of(cls, groups: "Sequence[np.ndarray] | ClientGroups[np.ndarray]") -> "ClientGroups[np.ndarray]":
        """``groups`` as int64 ``ClientGroups`` (itself when it is one)."""
        if isinstance(groups, ClientGroups):
            return groups
        sizes = np.fromiter((len(group) for group in groups), np.int64, len(groups))
        arrays = [np.asarray(group, dtype=np.int64) for group in groups]
        return ClientGroups(np.concatenate(arrays) if arrays else np.empty(0, np.int64), offsets_of(sizes))

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def to_tensor(self, device: torch.device | str) -> "ClientGroups[torch.Tensor]":
        """The same groups with a flat ``torch.long`` tensor on ``device``."""
        return ClientGroups(torch.as_tensor(self.flat, dtype=torch.long, device=device), self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, k: int) -> Indices: ...

    @overload
    def __getitem__(self, k: slice) -> list[Indices]: ...

    def __getitem__(self, k: int | slice) -> Indices | list[Indices]:
        if isinstance(k, slice):
            return [self[i] for i in range(len(self))[k]]
        k = self._checked(k)
        return self.flat[int(self.offsets[k]) : int(self.offsets[k + 1])]

    def size(self, k: int) -> int:
        """The length of group ``k``, read from the offsets."""
        k = self._checked(k)
        return int(self.offsets[k + 1] - self.offsets[k])

    def _checked(self, k: int) -> int:
        """Group ``k``'s position (``k`` may count from the end, as a list's index)."""
        groups = len(self.offsets) - 1
        if not -groups <= k < groups:
            raise IndexError(f"group {k} of {groups}")
        return k % groups

    def __iter__(self) -> Iterator[Indices]:
        return (self[k] for k in range(len(self)))


def offsets_of(sizes: np.ndarray) -> np.ndarray:
    """The offsets of consecutive groups of these sizes: 0, then their running sum."""
    return np.concatenate([np.zeros(1, np.int64), np.cumsum(sizes, dtype=np.int64)])
