"""Synchronous rounds of the clients online at the round's virtual time, over-selected, cut at a deadline, with
mid-round dropout: the clients a round aggregates, and the count of those it selected and lost."""

import math

from torch import Tensor

from lightfed.asynchronous.delays import DelayModel, LogNormal
from lightfed.core.seeding import derived_rng, sample_available_clients
from lightfed.errors import ConfigError
from lightfed.heterogeneity import LocalWork
from lightfed.run.availability import ClientAvailability
from lightfed.run.deadline import first_finishers
from lightfed.run.rounds import SampledRounds, client_plans
from lightfed.run.settings import AvailabilitySettings
from lightfed.streams import Stream

DROPOUT = 1  # the sub-key of ``(Stream.SAMPLING, round)`` that draws the round's dropouts


class AvailableRounds(SampledRounds):
    """Round ``r`` (virtual time ``r``) selects ``n = ceil(clients_per_round * over_selection)`` of the clients
    ``availability`` has online (all of them where fewer are), uniformly without replacement. Selected client ``i``
    drops out when ``u_{r,i} < dropout`` (``u_{r,i}`` ~ Uniform(0, 1), drawn per round and client); else it finishes
    at ``d_{r,i} * w_{r,i}``: its duration ``d_{r,i}`` from ``delays`` times its local steps (or epochs) ``w_{r,i}``.
    The server aggregates the first ``clients_per_round`` finishers by ``deadline`` (``first_finishers``); only they
    train. Every draw comes from the seed, so every process and a resumed run agree."""

    def __init__(
        self,
        seed: int,
        num_clients: int,
        clients_per_round: int,
        local_work: LocalWork,
        availability: ClientAvailability,
        settings: AvailabilitySettings,
    ) -> None:
        super().__init__(seed, num_clients, clients_per_round, local_work)
        self.availability, self.settings = availability, settings
        self.selected_count = math.ceil(clients_per_round * settings.over_selection)
        self.delays: DelayModel = settings.delays or LogNormal()
        self.delays.setup(num_clients, derived_rng(seed, Stream.DELAY_TRAITS))
        self._outcomes: dict[int, tuple[int, int, list[int]]] = {}  # round -> (online, selected, aggregated)

    def outcome(self, round: int) -> tuple[int, int, list[int]]:
        """How many clients were online in ``round``, how many the server selected, and the ids it aggregates."""
        if round not in self._outcomes:
            online = self.availability.online(float(round))
            if not online:
                raise ConfigError(
                    f"round {round + 1}: no client is online at virtual time {round}: widen trainer.availability_trace "
                    "or raise trainer.online_fraction"
                )
            selected = sample_available_clients(self.seed, round, online, self.selected_count)
            dropped_out = derived_rng(self.seed, Stream.SAMPLING, round, DROPOUT).random(self.num_clients)
            plans = client_plans(self.seed, self.local_work, round, selected)
            times = [
                self.delays.duration(plan.client_id, derived_rng(self.seed, Stream.DELAY, round, plan.client_id))
                * float(plan.steps if plan.steps is not None else plan.epochs or 1)
                for plan in plans
            ]
            aggregated = first_finishers(
                selected,
                times,
                [bool(dropped_out[c] < self.settings.dropout) for c in selected],
                self.settings.deadline,
                self.clients_per_round,
            )
            if not aggregated:
                raise ConfigError(
                    f"round {round + 1}: none of its {len(selected)} selected clients finished by the deadline: raise "
                    "trainer.round_deadline or trainer.over_selection, or lower trainer.client_dropout"
                )
            self._outcomes = {round: (len(online), len(selected), aggregated)}  # one round kept: the one under way
        return self._outcomes[round]

    def cohort(self, round: int) -> list[int]:
        """The clients ``round`` aggregates, in increasing id order."""
        return self.outcome(round)[2]

    def finish(self, round: int, params: Tensor, buffers: Tensor) -> dict[str, float]:
        """The round's counts: clients online, selected, aggregated, and dropped (selected, not aggregated)."""
        online, selected, aggregated = self.outcome(round)
        return {
            "round/clients_online": float(online),
            "round/clients_selected": float(selected),
            "round/clients_aggregated": float(len(aggregated)),
            "round/clients_dropped": float(selected - len(aggregated)),
        }
