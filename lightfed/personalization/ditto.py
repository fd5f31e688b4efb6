"""Ditto (Li et al. 2021): each client keeps a personal model trained on its data and pulled toward the global one."""

from dataclasses import replace

from lightfed.core.messages import ClientPlan
from lightfed.core.seeding import derived_seed
from lightfed.errors import ConfigError
from lightfed.local.ditto_steps import DittoSteps
from lightfed.personalization.personalized import PERSONAL, PERSONAL_BUFFERS, Personalized
from lightfed.streams import Stream


class Ditto(Personalized):
    """The strategy trains the global model w as usual; each sampled client also updates its personal model v from
    the global model it received, v <- v - lr (grad F(v) + lam (v - w)), for the same local work (or
    ``personal_epochs``/``personal_steps``), and is evaluated with v.

    In a config:

    ```yaml
    transforms:
      - class_path: lightfed.personalization.Ditto
        init_args: {lam: 0.1}
    ```

    Examples:
        A client's plan gets Ditto's personal steps, by default for the client's own local work:

        >>> import torch
        >>> from lightfed import ClientPlan
        >>> from lightfed.core.transforms import TransformContext
        >>> from lightfed.personalization import Ditto
        >>> from lightfed.strategies import ServerContext
        >>> ditto = Ditto(lam=0.1)
        >>> ditto.setup(TransformContext(ServerContext(torch.zeros(2), num_clients=2), {}))
        >>> rule = ditto.plan(ClientPlan(client_id=0, round=0, seed=0, epochs=2)).rule
        >>> type(rule).__name__, rule.lam, rule.epochs
        ('DittoSteps', 0.1, 2)
        >>> Ditto(personal_epochs=1, personal_steps=10)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: transforms: set one of Ditto's personal_epochs and personal_steps, not both
    """

    def __init__(
        self,
        lam: float = 0.1,
        personal_lr: float | None = None,
        personal_epochs: int | None = None,
        personal_steps: int | None = None,
    ) -> None:
        """
        Args:
            lam: Strength of the pull of the personal model toward the global one (lambda; 0: local training alone).
            personal_lr: Step size of the personal steps; null: the client's learning rate this round.
            personal_epochs: Passes over the client's data of the personal steps; null (with personal_steps null):
                the client's local work this round.
            personal_steps: Personal steps instead of personal_epochs.
        """
        if lam < 0:
            raise ConfigError(f"transforms: Ditto's lam must be >= 0, got {lam}")
        if personal_epochs is not None and personal_steps is not None:
            raise ConfigError("transforms: set one of Ditto's personal_epochs and personal_steps, not both")
        self.lam, self.personal_lr = lam, personal_lr
        self.personal_epochs, self.personal_steps = personal_epochs, personal_steps

    def plan(self, plan: ClientPlan) -> ClientPlan:
        epochs, steps = self.personal_epochs, self.personal_steps
        if epochs is None and steps is None:
            epochs, steps = plan.epochs, plan.steps
        states = self.client_states
        rule = DittoSteps(
            plan.client_id,
            states.get(plan.client_id, PERSONAL),
            states.get(plan.client_id, PERSONAL_BUFFERS),
            self.lam,
            derived_seed(plan.seed, Stream.PERSONAL_STEPS),
            epochs,
            steps,
            self.personal_lr,
            plan.rule,
        )
        return replace(plan, rule=rule)
