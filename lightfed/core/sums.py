"""Named float64 accumulators packed into one buffer, so one all-reduce combines a round."""

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

DELTA, WEIGHT = "delta", "weight"  # the sums of a strategy that reads only the weighted mean of the deltas


class Sums(Mapping[str, Tensor]):
    """Per-round sums of client contributions.

    Accumulating in float64 makes the float32 result independent of the order of summation in practice, so a run
    gives the same model on one process or many.

    Examples:
        >>> import torch
        >>> from lightfed import Sums
        >>> sums = Sums({"delta": 2, "weight": 1}, torch.device("cpu"))
        >>> sums.add("delta", torch.tensor([1.0, 2.0]), weight=3.0)
        >>> sums.add("delta", torch.tensor([0.0, 4.0]), weight=1.0)
        >>> sums.add("weight", 4.0)
        >>> sums["delta"] / sums["weight"]
        tensor([0.7500, 2.5000], dtype=torch.float64)
        >>> sums.buffer  # what one all-reduce combines
        tensor([ 3., 10.,  4.], dtype=torch.float64)
    """

    def __init__(self, sizes: Mapping[str, int], device: torch.device) -> None:
        self._buffer = torch.zeros(sum(sizes.values()), dtype=torch.float64, device=device)
        self._views: dict[str, Tensor] = {}
        self._numbers: dict[str, float] = {}  # numbers added since the buffer was last read: float64 in Python
        offset = 0
        for name, size in sizes.items():
            self._views[name] = self._buffer[offset : offset + size]
            offset += size

    @property
    def buffer(self) -> Tensor:
        """Every sum, in one float64 tensor."""
        self._add_numbers()
        return self._buffer

    def add(self, name: str, value: Tensor | float, weight: float = 1.0) -> None:
        """Adds ``weight * value`` to the sum called ``name`` (a number is added in Python, in the same float64, until
        the buffer is read: a tensor operation per number costs more than the number's sum)."""
        view = self._views[name]
        if isinstance(value, Tensor):
            if value.numel():  # nothing to add for an empty tensor (a model without buffers)
                view.add_(value.reshape(-1), alpha=weight)
        else:
            self._numbers[name] = self._numbers.get(name, 0.0) + value * weight

    def add_rows(self, name: str, rows: Tensor, weights: Sequence[float] | None = None) -> None:
        """Adds the rows of ``rows`` (``[k, ...]``), each times its weight in ``weights`` (default 1), to the sum
        called ``name``: what ``add`` gives row by row, in one float64 operation."""
        view = self._views[name]
        if not view.numel() or not len(rows):
            return
        rows = rows.reshape(len(rows), -1).to(torch.float64)
        if weights is None:
            view.add_(rows.sum(0))
        else:
            view.addmv_(rows.T, torch.tensor(weights, dtype=torch.float64).to(view.device, non_blocking=True))

    def zero_(self) -> None:
        self._numbers.clear()
        self._buffer.zero_()

    def __getitem__(self, name: str) -> Tensor:
        self._add_numbers()
        return self._views[name]

    def _add_numbers(self) -> None:
        for name, number in self._numbers.items():
            self._views[name].add_(number)
        self._numbers.clear()

    def __iter__(self):
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)
