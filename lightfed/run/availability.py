"""Which clients are online at a round's virtual time: always, per a trace file, or per a diurnal model.

Round ``r`` happens at virtual time ``t = r`` (one unit per round). The server samples only clients online at ``t``.
"""

import json
from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from lightfed.core.seeding import derived_rng
from lightfed.errors import ConfigError
from lightfed.streams import Stream

PHASE = 1  # the sub-key of ``Stream.DELAY_TRAITS`` that draws the diurnal phases


class ClientAvailability(ABC):
    """The clients online at a virtual time, the same on every process and after a resume."""

    @abstractmethod
    def online(self, time: float) -> list[int]:
        """The ids of the clients online at ``time``, in increasing order."""


class AlwaysOnline(ClientAvailability):
    """Every one of ``num_clients`` clients is online at every time."""

    def __init__(self, num_clients: int) -> None:
        self.everyone = list(range(num_clients))

    def online(self, time: float) -> list[int]:
        return self.everyone


class DiurnalAvailability(ClientAvailability):
    """Client ``i`` is online at ``t`` when ``(t + phase_i) mod day < fraction * day``, with ``phase_i`` drawn once
    from Uniform(0, ``day``) by the seed: each client is online the same ``fraction`` of a day, at its own hours
    (the diurnal pattern of Bonawitz et al., 2019)."""

    def __init__(self, seed: int, num_clients: int, fraction: float, day: int) -> None:
        self.phases = derived_rng(seed, Stream.DELAY_TRAITS, PHASE).uniform(0.0, day, size=num_clients)
        self.fraction, self.day = fraction, day

    def online(self, time: float) -> list[int]:
        hours = np.mod(time + self.phases, self.day)
        return [int(i) for i in np.flatnonzero(hours < self.fraction * self.day)]


class TraceAvailability(ClientAvailability):
    """Client ``i`` is online at ``t`` when ``start <= t < end`` for one of its intervals ``[start, end]``; a client
    the trace does not name is never online."""

    def __init__(self, intervals: dict[int, list[tuple[float, float]]]) -> None:
        self.intervals = intervals

    def online(self, time: float) -> list[int]:
        return sorted(c for c, spans in self.intervals.items() if any(s <= time < e for s, e in spans))


def read_trace(path: str, num_clients: int) -> TraceAvailability:
    """The trace of a JSON file ``{"<client id>": [[start, end], ...], ...}``; ``ConfigError`` for a client id that
    is not one of ``num_clients`` or an interval that is not ``[start, end]`` with ``start <= end``."""
    try:
        written = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"trainer.availability_trace: cannot read {path!r} as JSON: {error}") from None
    if not isinstance(written, dict):
        raise ConfigError(f"trainer.availability_trace: {path!r} must hold an object {{client id: intervals}}")
    intervals = {}
    for key, spans in written.items():
        client = int(key) if str(key).isdigit() else -1
        if not 0 <= client < num_clients:
            raise ConfigError(
                f"trainer.availability_trace: {path!r} names client {key!r}, not one of the {num_clients} clients "
                f"the server samples (0 to {num_clients - 1})"
            )
        if not isinstance(spans, list) or not all(_is_interval(span) for span in spans):
            raise ConfigError(
                f"trainer.availability_trace: client {key} in {path!r} needs a list of [start, end] with start <= end"
            )
        intervals[client] = [(float(s), float(e)) for s, e in spans]
    return TraceAvailability(intervals)


def _is_interval(span: object) -> bool:
    return (
        isinstance(span, list)
        and len(span) == 2
        and all(isinstance(x, int | float) for x in span)
        and span[0] <= span[1]
    )
