"""What the client loop asks of a privacy mechanism: one session per client and round, a few hooks per step."""

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import cast

import torch
from lightning import LightningModule
from lightning.fabric import Fabric

from lightfed.core.client_states import ClientStates, ProcessStore
from lightfed.core.local_context import LocalContext
from lightfed.core.local_session import LocalSession
from lightfed.core.messages import ClientPlan
from lightfed.core.requirements import Requirements
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError


class BudgetReached(Exception):
    """Training the next round would take a client past its privacy budget; the run stops before it."""


class ClientPrivacy(ABC):
    """A differential-privacy mechanism applied to every client's local training (``trainer.privacy``).

    Per-client state (an accountant) lives in its own store, ``client_states``, on the process that trains the client
    (``Requirements(client_state=True)``).

    In a config, a mechanism is the trainer's:

    ```yaml
    trainer:
      privacy:
        class_path: lightfed.privacy.DPSGD
        init_args: {noise_multiplier: 1.0, max_grad_norm: 1.0}
    ```

    Examples:
        Every mechanism that changes how clients train refuses 16-bit mixed precision:

        >>> from lightfed.privacy import DPSGD, ClientPrivacy
        >>> privacy = DPSGD(noise_multiplier=1.0)
        >>> isinstance(privacy, ClientPrivacy), privacy.private
        (True, True)
        >>> privacy.check_precision("16-mixed")
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: differential privacy needs trainer.precision 32-true, got '16-mixed': ...
    """

    requirements = Requirements()
    private = True  # changes how clients train (``NoPrivacy``: not)
    limits_budget = False  # the run stops before a client would exceed its privacy budget
    accounts = True  # reports an epsilon, which must cover everything a client sends (``Requirements.sends``)

    def check_precision(self, precision: str) -> None:
        """Refuses 16-bit mixed precision, which distorts the gradient norms that clipping bounds."""
        if precision != "32-true":
            raise ConfigError(
                f"differential privacy needs trainer.precision 32-true, got {precision!r}: 16-bit mixed precision "
                "distorts the gradient norms that clipping bounds"
            )

    def prepare(self, module: LightningModule, precision: str) -> LightningModule:
        """Checks the model (and may convert it in place) before training; refuses 16-bit mixed precision."""
        self.check_precision(precision)
        return module

    def setup(
        self, data: FederatedDataModule, clients_per_round: int, planned: Callable[[], Iterable[ClientPlan]]
    ) -> None:
        """Called once per run (before a resume too): the data and every client plan the run will make."""
        self.data, self.clients_per_round, self.planned = data, clients_per_round, planned
        self.client_states = ClientStates()

    def stores(self) -> dict[str, ProcessStore]:
        """What only this process holds, by name (saved in its own checkpoint file): the per-client store."""
        return {"privacy": self.client_states}

    @abstractmethod
    def session(self, context: LocalContext, plan: ClientPlan, generator: torch.Generator) -> LocalSession:
        """The session of one client in one round: a ``LocalSession`` subclass overriding what the mechanism changes."""

    def would_exceed(self, plan: ClientPlan) -> bool:
        """Whether training this plan would take its client past the privacy budget."""
        return False

    def check_budget(self, fabric: Fabric, round: int, plans: list[ClientPlan]) -> None:
        """Raises ``BudgetReached`` on every process when a client of ``plans`` (this process's in round ``round``)
        would exceed its privacy budget; a collective call where the mechanism ``limits_budget``."""
        if not self.limits_budget:
            return
        over = max((plan.client_id for plan in plans if self.would_exceed(plan)), default=-1)
        reduced = cast(torch.Tensor, fabric.all_reduce(torch.tensor(over + 1.0, device=fabric.device), reduce_op="max"))
        client_id = int(reduced) - 1
        if client_id >= 0:
            raise BudgetReached(f"client {client_id} would exceed its privacy budget in round {round + 1}")

    def metrics(self, fabric: Fabric) -> dict[str, float]:
        """Scalars to log after each round (a collective call: every process calls it)."""
        return {}


class NoPrivacy(ClientPrivacy):
    """No mechanism (the default ``trainer.privacy``): clients train as they are, and nothing is accounted.

    Examples:
        >>> from lightfed.privacy import NoPrivacy
        >>> privacy = NoPrivacy()
        >>> privacy.private, privacy.accounts
        (False, False)
        >>> privacy.check_precision("16-mixed")  # any precision
    """

    private = False
    accounts = False

    def check_precision(self, precision: str) -> None:
        """Any precision."""

    def setup(
        self, data: FederatedDataModule, clients_per_round: int, planned: Callable[[], Iterable[ClientPlan]]
    ) -> None:
        """Nothing to set up."""

    def stores(self) -> dict[str, ProcessStore]:
        return {}

    def session(self, context: LocalContext, plan: ClientPlan, generator: torch.Generator) -> LocalSession:
        return LocalSession(context, plan, generator)


NO_PRIVACY = NoPrivacy()  # stateless: one for every run
