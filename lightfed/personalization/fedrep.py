"""FedRep (Collins et al. 2021): a personal head trained first with the shared body frozen, then the body."""

import math
from dataclasses import replace

from lightfed.core.local_rule import LocalRule
from lightfed.core.messages import ClientPlan
from lightfed.core.requirements import Requirements
from lightfed.core.transforms import TransformContext
from lightfed.errors import ConfigError
from lightfed.local.head_then_body import HeadThenBody
from lightfed.personalization.fedper import FedPer
from lightfed.personalization.personalized import run_data


class FedRep(FedPer):
    """``FedPer`` with FedRep's local schedule: each round a client first trains its personal head for
    ``head_epochs`` passes over its data with the body frozen, then the body for the trainer's local work
    (``trainer.local_epochs`` or ``local_steps``) with the head frozen. Only the body is aggregated.

    Frozen means a zero gradient, so the model's optimizer must be plain SGD (momentum 0, weight decay 0).

    In a config:

    ```yaml
    transforms:
      - class_path: lightfed.personalization.FedRep
        init_args: {personal: ["net.9.*"], head_epochs: 10}
    ```

    Examples:
        >>> from lightfed.personalization import FedRep
        >>> fedrep = FedRep(personal=["net.9.*"], head_epochs=10)
        >>> fedrep.requirements.plain_sgd, fedrep.requirements.no_weight_decay
        (True, True)
        >>> FedRep(personal=["net.9.*"], head_epochs=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: transforms: FedRep's head_epochs must be >= 1, got 0
    """

    method = "FedRep"
    own_requirements = FedPer.own_requirements | Requirements(plain_sgd=True, no_weight_decay=True)

    def __init__(self, personal: list[str] | None = None, head_epochs: int = 10) -> None:
        """
        Args:
            personal: Name patterns of the head's parameters, e.g. ``["net.7.*"]``; null: the model's
                ``personal_parameters`` attribute.
            head_epochs: Passes over the client's data that train the head before the body (10 in the paper).
        """
        if head_epochs < 1:
            raise ConfigError(f"transforms: FedRep's head_epochs must be >= 1, got {head_epochs}")
        super().__init__(personal)
        self.head_epochs = head_epochs

    def setup(self, context: TransformContext) -> None:
        super().setup(context)
        self.data = run_data(context, self.method)

    def head_steps(self, client_id: int) -> int:
        """The steps of ``head_epochs`` passes over the client's data."""
        return self.head_epochs * max(1, math.ceil(self.data.client_size(client_id) / self.data.batch_size))

    def plan(self, plan: ClientPlan) -> ClientPlan:
        plan = super().plan(plan)
        if plan.epochs is not None:
            return replace(plan, epochs=plan.epochs + self.head_epochs)
        return replace(plan, steps=(plan.steps or 0) + self.head_steps(plan.client_id))

    def rule(self, plan: ClientPlan) -> LocalRule:
        return HeadThenBody(*self.personal_layers(plan.client_id), self.head_steps(plan.client_id), plan.rule)
