"""What the messages of a round cost on the wire, as a deployment would encode them: every tensor at its own element
size (float32 weights: 4 bytes a value), a client's four counts at 4 bytes each."""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from torch import Tensor

from lightfed.core.messages import ClientRows, ClientUpdate

COUNTS = 4 * 4  # examples, steps, local time and training loss, 4 bytes each


def tensor_bytes(tensors: Iterable[Any]) -> int:
    """The bytes of the tensors among ``tensors`` (a number that is not a tensor: 4 bytes)."""
    return sum(t.numel() * t.element_size() if isinstance(t, Tensor) else 4 for t in tensors)


def received_bytes(weights: Sequence[tuple[Tensor, Tensor]], vectors: Sequence[Mapping[str, Tensor]]) -> int:
    """What clients receive, summed: each its global weights (params, buffers) and the vectors its strategy sends
    beside them; weights several clients receive (every client of a synchronous round) are sized once."""
    sized: dict[tuple[int, int], int] = {}
    total = 0
    for (params, buffers), sent in zip(weights, vectors, strict=True):
        key = (id(params), id(buffers))
        if key not in sized:
            sized[key] = tensor_bytes([params, buffers])
        total += sized[key] + (tensor_bytes(sent.values()) if sent else 0)
    return total


def sent_bytes(update: ClientUpdate) -> int:
    """What a client sends as it trained it: its delta, its buffers, its counts and its report."""
    return tensor_bytes([update.delta, update.buffers, *update.report.values()]) + COUNTS


def rows_sent_bytes(rows: ClientRows) -> int:
    """What the clients of ``rows`` send together: ``sent_bytes`` of each row, summed."""
    row = tensor_bytes([rows.deltas[0], rows.buffers[0]]) + COUNTS if len(rows) else 0
    return len(rows) * row + sum(tensor_bytes(report.values()) for report in rows.reports if report)
