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
    ``personal_epochs``/``personal_steps``), and is evaluated with v."""

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
