"""APFL (Deng et al. 2020): each client's model is a mixture alpha v + (1 - alpha) w of a personal and the global
model."""

from dataclasses import replace

from torch import Tensor

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.requirements import Requirements, Sent
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.local.apfl_mixing import APFLMixing
from lightfed.personalization.personalized import PERSONAL, Personalized

ALPHA = "alpha"


class APFL(Personalized):
    """The strategy trains the global model w with plain local steps; each step also moves the client's personal
    model v along the gradient at the mixture alpha v + (1 - alpha) w (``lightfed.local.apfl_mixing.APFLMixing``).
    A client is evaluated with alpha v + (1 - alpha) w, w the current global model.

    ``alpha_lr`` null keeps each client's alpha fixed at ``alpha`` (the paper's fixed-alpha runs); a number updates it
    by gradient descent each step (its Algorithm 1). The local model's steps are plain: a strategy with a rule of its
    own (a proximal term, a correction) is refused.

    In a config:

    ```yaml
    transforms:
      - class_path: lightfed.personalization.APFL
        init_args: {alpha: 0.25, alpha_lr: null}
    ```

    Examples:
        A client with personal model v = [4, 8] and alpha 0.25 is evaluated, at global model w = 0, with 0.25 v:

        >>> import torch
        >>> from lightfed import ClientUpdate
        >>> from lightfed.core.transforms import TransformContext
        >>> from lightfed.personalization import APFL
        >>> from lightfed.strategies import ServerContext
        >>> apfl = APFL(alpha=0.25)
        >>> apfl.setup(TransformContext(ServerContext(torch.zeros(2), num_clients=2), {}))
        >>> personal = torch.tensor([4.0, 8.0])
        >>> report = {"personal": personal, "personal_buffers": torch.zeros(0), "alpha": torch.tensor(0.25)}
        >>> update = ClientUpdate(0, torch.zeros(2), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0), report)
        >>> _ = apfl.contribution(update, 0, None)
        >>> apfl.client_model(0, params=torch.zeros(2), buffers=torch.zeros(0))
        (tensor([1., 2.]), tensor([]))
    """

    own_requirements = Personalized.own_requirements | Requirements(sends=frozenset({Sent(ALPHA, "kept")}))

    def __init__(self, alpha: float = 0.25, alpha_lr: float | None = None) -> None:
        """
        Args:
            alpha: The mixing weight of the personal model (each client's starting value when alpha_lr is set).
            alpha_lr: Step size of alpha's own gradient step; null: alpha stays fixed.
        """
        if not 0 <= alpha <= 1:
            raise ConfigError(f"transforms: APFL's alpha must be in [0, 1], got {alpha}")
        self.alpha, self.alpha_lr = alpha, alpha_lr

    def plan(self, plan: ClientPlan) -> ClientPlan:
        if plan.rule is not None:
            raise ConfigError(
                "transforms: APFL trains the global model with the model's own local steps: use a strategy without a "
                f"local rule (FedAvg, FedAdam, ...), not one with {type(plan.rule).__name__}"
            )
        alpha = self.client_states.get(plan.client_id, ALPHA)
        rule = APFLMixing(
            self.client_states.get(plan.client_id, PERSONAL),
            self.alpha if alpha is None else float(alpha),
            self.alpha_lr,
        )
        return replace(plan, rule=rule)

    def contribution(self, update: ClientUpdate, round: int, sums: Sums) -> ClientUpdate | None:
        report = dict(update.report)
        self.client_states.set(update.client_id, ALPHA, report.pop(ALPHA))
        return super().contribution(replace(update, report=report), round, sums)

    def client_model(self, client_id: int, params: Tensor, buffers: Tensor) -> tuple[Tensor, Tensor] | None:
        personal = super().client_model(client_id, params, buffers)
        if personal is None:
            return None
        alpha = float(self.client_states.get(client_id, ALPHA))  # type: ignore[arg-type]
        return params * (1 - alpha) + personal[0] * alpha, personal[1]
