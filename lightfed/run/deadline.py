"""A round's deadline with over-selection (Bonawitz et al., 2019): which of the selected clients the server
aggregates."""

from collections.abc import Sequence


def first_finishers(
    selected: Sequence[int],
    finish_times: Sequence[float],
    dropped_out: Sequence[bool],
    deadline: float | None,
    clients_per_round: int,
) -> list[int]:
    """The ids the server aggregates, in increasing order: of the ``selected`` clients that did not drop out and
    finish by the ``deadline`` (``finish_times[k] <= deadline``; None: no deadline), the first ``clients_per_round``
    by finish time (ties: the lower id first). The others count as dropped."""
    finished = [
        (time, client)
        for client, time, out in zip(selected, finish_times, dropped_out, strict=True)
        if not out and (deadline is None or time <= deadline)
    ]
    return sorted(client for _, client in sorted(finished)[:clients_per_round])
