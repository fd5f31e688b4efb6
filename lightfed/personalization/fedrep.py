"""FedRep (Collins et al. 2021): a personal head trained first with the shared body frozen, then the body."""

import math
from collections.abc import Mapping
from dataclasses import replace

from lightning import LightningModule
from torch import Tensor

from lightfed.core.local_rule import LocalRule
from lightfed.core.messages import ClientPlan
from lightfed.core.requirements import Requirements
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.local.head_then_body import HeadThenBody
from lightfed.personalization.fedper import FedPer
from lightfed.strategies.base import NOTHING, Strategy


class FedRep(FedPer):
    """``FedPer`` with FedRep's local schedule: each round a client first trains its personal head for
    ``head_epochs`` passes over its data with the body frozen, then the body for the trainer's local work
    (``trainer.local_epochs`` or ``local_steps``) with the head frozen. Only the body is aggregated.

    Frozen means a zero gradient, so the model's optimizer must be plain SGD (momentum 0, weight decay 0)."""

    method = "FedRep"
    own_requirements = FedPer.own_requirements | Requirements(plain_sgd=True, no_weight_decay=True)

    def __init__(self, strategy: Strategy, personal: list[str] | None = None, head_epochs: int = 10) -> None:
        """
        Args:
            strategy: The strategy that aggregates the body (sums path: FedAvg, FedProx, FedAdam, ...).
            personal: Name patterns of the head's parameters, e.g. ``["net.7.*"]``; null: the model's
                ``personal_parameters`` attribute.
            head_epochs: Passes over the client's data that train the head before the body (10 in the paper).
        """
        if head_epochs < 1:
            raise ConfigError(f"strategy.head_epochs must be >= 1, got {head_epochs}")
        super().__init__(strategy, personal)
        self.head_epochs = head_epochs

    def bind(self, module: LightningModule, data: FederatedDataModule) -> None:
        super().bind(module, data)
        self.data = data

    def head_steps(self, client_id: int) -> int:
        """The steps of ``head_epochs`` passes over the client's data."""
        return self.head_epochs * max(1, math.ceil(self.data.client_size(client_id) / self.data.batch_size))

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        plan = super().configure_client(plan, received)
        if plan.epochs is not None:
            return replace(plan, epochs=plan.epochs + self.head_epochs)
        return replace(plan, steps=(plan.steps or 0) + self.head_steps(plan.client_id))

    def rule(self, plan: ClientPlan) -> LocalRule:
        return HeadThenBody(*self.personal_layers(plan.client_id), self.head_steps(plan.client_id), plan.rule)
