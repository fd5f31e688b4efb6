"""Synchronous rounds: which clients train in a round and from what; the plan each is given before its strategy
configures it."""

from collections.abc import Iterator
from typing import Any

from torch import Tensor

from lightfed.core.messages import ClientPlan
from lightfed.core.seeding import derived_seeds, sample_clients
from lightfed.heterogeneity import LocalWork
from lightfed.run.engine import Job, RoundEngine
from lightfed.streams import Stream


def client_plan(seed: int, local_work: LocalWork, round: int, client_id: int) -> ClientPlan:
    """The plan of ``client_id`` in ``round``: its local work and the seed of its randomness."""
    (plan,) = client_plans(seed, local_work, round, [client_id])
    return plan


def client_plans(seed: int, local_work: LocalWork, round: int, client_ids: list[int]) -> list[ClientPlan]:
    """``client_plan`` of each of ``client_ids``, their seeds derived together."""
    seeds = derived_seeds(seed, Stream.CLIENT, round, last=client_ids)
    fixed = local_work.fixed  # every client's work, where nothing is drawn
    return [
        ClientPlan(client_id, round, client_seed, *(fixed or local_work.draw(seed, round, client_id)))
        for client_id, client_seed in zip(client_ids, seeds, strict=True)
    ]


class SampledRounds:
    """Each round, ``clients_per_round`` clients sampled from a generator seeded by (seed, round) train from the
    current global model. The asynchronous trainer's ``BufferedRounds`` has the same methods."""

    def __init__(self, seed: int, num_clients: int, clients_per_round: int, local_work: LocalWork) -> None:
        self.seed, self.num_clients, self.clients_per_round, self.local_work = (
            seed,
            num_clients,
            clients_per_round,
            local_work,
        )

    def begin(self, engine: RoundEngine, params: Tensor, buffers: Tensor) -> None:
        """Called once before the first round of a fresh run."""

    def cohort(self, round: int) -> list[int]:
        """The clients of round ``round``, in increasing id order."""
        return sample_clients(self.seed, round, self.num_clients, self.clients_per_round)

    def jobs(self, round: int, params: Tensor, buffers: Tensor) -> list[Job]:
        """The round's jobs, in increasing client id order."""
        return [
            Job(plan, params, buffers) for plan in client_plans(self.seed, self.local_work, round, self.cohort(round))
        ]

    def finish(self, round: int, params: Tensor, buffers: Tensor) -> dict[str, float]:
        """Called with the round's result; returns scalars to log with it."""
        return {}

    def planned(self, rounds: int) -> Iterator[ClientPlan]:
        """Every client plan of a run of ``rounds`` rounds, before the strategy configures it (privacy budgets)."""
        for round in range(rounds):
            yield from client_plans(self.seed, self.local_work, round, self.cohort(round))

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned."""
