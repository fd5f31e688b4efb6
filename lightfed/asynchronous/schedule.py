"""Event-driven simulation of buffered asynchronous FL: who trains from which model version, and when it arrives."""

import heapq
from dataclasses import astuple, dataclass
from typing import Any

from lightfed.asynchronous.delays import DelayModel, SpeedTiers
from lightfed.core.seeding import derived_rng
from lightfed.errors import ConfigError
from lightfed.streams import Stream


class Asynchrony:
    """Settings of buffered asynchronous training: ``concurrency`` clients (M_c) train at once, the server
    aggregates every ``trainer.clients_per_round`` (S) arrivals, and job durations come from ``delays``.

    In a config:

    ```yaml
    trainer:
      clients_per_round: 5  # S
    asynchronous:
      concurrency: 10  # M_c
      delays: {class_path: lightfed.asynchronous.delays.SpeedTiers}
    ```

    Examples:
        >>> from lightfed import Asynchrony, FederatedTrainer
        >>> asynchrony = Asynchrony(concurrency=10)
        >>> type(asynchrony.delays).__name__
        'SpeedTiers'
        >>> trainer = FederatedTrainer.from_settings(asynchrony, accelerator="cpu", clients_per_round=5, logger=False)
        >>> trainer.asynchronous
        True
        >>> Asynchrony(concurrency=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: asynchronous.concurrency must be >= 1, got 0
    """

    def __init__(self, concurrency: int = 20, delays: DelayModel | None = None) -> None:
        """
        Args:
            concurrency: Clients training at the same time, M_c (>= S; M_c = S is synchronous: no staleness).
            delays: Duration of each client job on the virtual clock; null: a new ``SpeedTiers()`` (a default
                instance shared by every ``Asynchrony`` would carry one run's client traits into the next).
        """
        if concurrency < 1:
            raise ConfigError(f"asynchronous.concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self.delays = SpeedTiers() if delays is None else delays


@dataclass(frozen=True, order=True)
class Job:
    """One client training from model ``version``; it arrives at virtual time ``finish`` (ties: dispatch order)."""

    finish: float
    order: int
    client_id: int
    version: int


class BufferedSchedule:
    """The virtual clock and the jobs in flight: M_c distinct clients start from version 0; each aggregation takes
    the S earliest arrivals, and after it S clients drawn uniformly from the idle ones start from the new version.

    Every draw comes from a stream of (seed, version) or (seed, version, client), so all processes agree and a
    resumed run continues exactly; no client is ever in flight twice.
    """

    def __init__(self, num_clients: int, concurrency: int, buffer_size: int, delays: DelayModel, seed: int) -> None:
        if not buffer_size <= concurrency <= num_clients:
            raise ConfigError(
                f"need trainer.clients_per_round (S={buffer_size}) <= asynchronous.concurrency "
                f"(M_c={concurrency}) <= number of clients ({num_clients}); change one of them"
            )
        self.num_clients, self.concurrency, self.buffer_size = num_clients, concurrency, buffer_size
        self.delays, self.seed = delays, seed
        delays.setup(num_clients, derived_rng(seed, Stream.DELAY_TRAITS))
        self.clock = 0.0
        self._in_flight: list[Job] = []
        self._dispatched = 0

    @property
    def in_flight(self) -> list[Job]:
        """The jobs not yet aggregated, earliest arrival first."""
        return sorted(self._in_flight)

    def start(self) -> list[Job]:
        """Starts ``concurrency`` clients from version 0."""
        return self.dispatch(0, self.concurrency)

    def next_buffer(self) -> list[Job]:
        """The S earliest arrivals, by client id; the clock moves to the last of them."""
        jobs = [heapq.heappop(self._in_flight) for _ in range(self.buffer_size)]
        self.clock = jobs[-1].finish
        return sorted(jobs, key=lambda job: job.client_id)

    def dispatch(self, version: int, count: int | None = None) -> list[Job]:
        """Starts ``count`` (default S) idle clients, drawn uniformly, from ``version`` at the current time."""
        busy = {job.client_id for job in self._in_flight}
        idle = [c for c in range(self.num_clients) if c not in busy]
        chosen = derived_rng(self.seed, Stream.DISPATCH, version).choice(
            idle, size=count or self.buffer_size, replace=False
        )
        jobs = []
        for client_id in sorted(int(c) for c in chosen):
            duration = self.delays.duration(client_id, derived_rng(self.seed, Stream.DELAY, version, client_id))
            jobs.append(Job(self.clock + duration, self._dispatched, client_id, version))
            self._dispatched += 1
        for job in jobs:
            heapq.heappush(self._in_flight, job)
        return jobs

    def state_dict(self) -> dict[str, Any]:
        return {
            "clock": self.clock,
            "dispatched": self._dispatched,
            "in_flight": [astuple(job) for job in self._in_flight],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clock, self._dispatched = state["clock"], state["dispatched"]
        self._in_flight = [Job(*job) for job in state["in_flight"]]
        heapq.heapify(self._in_flight)
