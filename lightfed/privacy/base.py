"""What the client loop asks of a privacy mechanism: one session per client and round, a few hooks per step."""

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable

import torch
from lightning import LightningModule
from lightning.fabric import Fabric

from lightfed.core.client_states import ClientStates
from lightfed.core.local_context import LocalContext
from lightfed.core.local_session import LocalSession
from lightfed.core.messages import ClientPlan
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError


class BudgetReached(Exception):
    """Training the next round would take a client past its privacy budget; the run stops before it."""


class ClientPrivacy(ABC):
    """A differential-privacy mechanism applied to every client's local training (``trainer.privacy``)."""

    keeps_client_state = False  # per-client state (an accountant) lives where the client trains
    limits_budget = False  # the run stops before a client would exceed its privacy budget

    def prepare(self, module: LightningModule, precision: str) -> LightningModule:
        """Checks the model (and may convert it in place) before training; refuses 16-bit mixed precision."""
        if precision != "32-true":
            raise ConfigError(
                f"differential privacy needs trainer.precision 32-true, got {precision!r}: 16-bit mixed precision "
                "distorts the gradient norms that clipping bounds"
            )
        return module

    def setup(
        self,
        data: FederatedDataModule,
        states: ClientStates,
        clients_per_round: int,
        planned: Callable[[], Iterable[ClientPlan]],
    ) -> None:
        """Called once per run: the data, the per-client state store, and every client plan the run will make."""
        self.data, self.states, self.clients_per_round, self.planned = data, states, clients_per_round, planned

    @abstractmethod
    def session(self, context: LocalContext, plan: ClientPlan, generator: torch.Generator) -> LocalSession:
        """The session of one client in one round: a ``LocalSession`` subclass overriding what the mechanism changes."""

    def would_exceed(self, plan: ClientPlan) -> bool:
        """Whether training this plan would take its client past the privacy budget."""
        return False

    def metrics(self, fabric: Fabric) -> dict[str, float]:
        """Scalars to log after each round (a collective call: every process calls it)."""
        return {}
