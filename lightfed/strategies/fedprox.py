"""FedProx (Li et al. 2020): FedAvg whose clients minimise f_i(w) + mu/2 ||w - w_global||^2."""

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from lightfed.core.messages import ClientPlan
from lightfed.errors import ConfigError
from lightfed.local.proximal import ProximalTerm
from lightfed.strategies.base import NOTHING
from lightfed.strategies.fedavg import FedAvg


class FedProx(FedAvg):
    """FedAvg aggregation; each client's gradient gets the proximal term mu (w - w_global).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedProx
      init_args: {mu: 0.01}
    ```

    Examples:
        Each client's plan carries the proximal term as its local rule:

        >>> from lightfed import ClientPlan
        >>> from lightfed.strategies import FedProx
        >>> plan = FedProx(mu=0.1).configure_client(ClientPlan(client_id=0, round=0, seed=0))
        >>> type(plan.rule).__name__, plan.rule.mu
        ('ProximalTerm', 0.1)
        >>> FedProx(mu=-1.0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: strategy.mu must be >= 0, got -1.0
    """

    def __init__(self, mu: float = 0.01, server_lr: float = 1.0) -> None:
        """
        Args:
            mu: Weight of the proximal term (0 is FedAvg).
            server_lr: Scale of the averaged delta applied to the global model.

        Raises:
            ConfigError: ``mu`` is negative or ``server_lr`` is not positive.
        """
        if mu < 0:
            raise ConfigError(f"strategy.mu must be >= 0, got {mu}")
        super().__init__(server_lr=server_lr)
        self.mu = mu

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        return replace(plan, rule=ProximalTerm(self.mu))
