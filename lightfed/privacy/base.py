"""What the client loop asks of a privacy mechanism: one session per client and round, a few hooks per step."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import torch
from lightning import LightningModule
from lightning.fabric import Fabric
from torch import Tensor

from lightfed.core.client_states import ClientStates
from lightfed.errors import ConfigError
from lightfed.core.messages import ClientPlan

if TYPE_CHECKING:
    from lightfed.core.client import ClientTrainer
    from lightfed.data.module import Batch, FederatedDataModule


class BudgetReached(Exception):
    """Training the next round would take a client past its privacy budget; the run stops before it."""


class LocalSession:
    """One client's local training in one round: its batches, the gradient of a batch, a hook before each step.

    This base is training without privacy (shuffled batches, plain gradients); mechanisms override what they change.
    """

    def __init__(self, client: ClientTrainer, plan: ClientPlan, generator: torch.Generator) -> None:
        self.client, self.plan, self.generator = client, plan, generator

    def batches(self) -> Iterator[Batch]:
        return self.client.data.client_batches(self.plan.client_id, self.generator, self.plan.epochs, self.plan.steps)

    def gradient(self, batch: Batch, batch_idx: int) -> Tensor:
        """Loss of ``batch`` at the current parameters; its gradient lands in ``client.flat.grads``."""
        return self.client.backward(batch, batch_idx)

    def before_step(self, grad: Tensor) -> None:
        """Called with the step's final flat gradient (after the plan's rule), before the optimizer step."""

    def finish(self) -> None:
        """Called after the client's last step."""


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
    def session(self, client: ClientTrainer, plan: ClientPlan, generator: torch.Generator) -> LocalSession:
        """The session of one client in one round."""

    def would_exceed(self, plan: ClientPlan) -> bool:
        """Whether training this plan would take its client past the privacy budget."""
        return False

    def metrics(self, fabric: Fabric) -> dict[str, float]:
        """Scalars to log after each round (a collective call: every process calls it)."""
        return {}
