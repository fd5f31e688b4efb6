"""Named float64 accumulators packed into one buffer, so one all-reduce combines a round."""

from collections.abc import Mapping

import torch
from torch import Tensor

DELTA, WEIGHT = "delta", "weight"  # the sums of a strategy that reads only the weighted mean of the deltas


class Sums(Mapping[str, Tensor]):
    """Per-round sums of client contributions.

    Accumulating in float64 makes the float32 result independent of the order of summation in practice, so a run
    gives the same model on one process or many.
    """

    def __init__(self, sizes: Mapping[str, int], device: torch.device) -> None:
        self.buffer = torch.zeros(sum(sizes.values()), dtype=torch.float64, device=device)
        self._views: dict[str, Tensor] = {}
        offset = 0
        for name, size in sizes.items():
            self._views[name] = self.buffer[offset : offset + size]
            offset += size

    def add(self, name: str, value: Tensor | float, weight: float = 1.0) -> None:
        """Adds ``weight * value`` to the sum called ``name``."""
        view = self._views[name]
        if isinstance(value, Tensor):
            view.add_(value.reshape(-1), alpha=weight)
        else:
            view.add_(value * weight)

    def zero_(self) -> None:
        self.buffer.zero_()

    def __getitem__(self, name: str) -> Tensor:
        return self._views[name]

    def __iter__(self):
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)
