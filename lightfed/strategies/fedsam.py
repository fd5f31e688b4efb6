"""FedSAM (Qu et al. 2022; Caldarola et al. 2022) and FedASAM: SAM or ASAM local steps, FedAvg on the server."""

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from lightfed.core.messages import ClientPlan
from lightfed.local.sharpness import SharpnessAware
from lightfed.strategies.base import NOTHING
from lightfed.strategies.fedavg import FedAvg


class FedSAM(FedAvg):
    """FedAvg whose clients step with the gradient at w + rho g / ||g|| (sharpness-aware minimisation).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedSAM
      init_args: {rho: 0.05}
    ```

    Examples:
        >>> from lightfed import ClientPlan
        >>> from lightfed.strategies import FedSAM
        >>> plan = FedSAM(rho=0.05).configure_client(ClientPlan(client_id=0, round=0, seed=0))
        >>> type(plan.rule).__name__
        'SharpnessAware'
        >>> FedSAM(rho=-1)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: SAM's rho must be >= 0, got -1
    """

    adaptive = False

    def __init__(self, rho: float = 0.05, eta: float = 0.01, server_lr: float = 1.0) -> None:
        """
        Args:
            rho: Radius of the ascent step.
            eta: ASAM's offset of the scale |w| + eta (FedASAM only).
            server_lr: Scale of the averaged delta applied to the global model.

        Raises:
            ConfigError: ``rho`` or ``eta`` is negative, or ``server_lr`` is not positive.
        """
        super().__init__(server_lr=server_lr)
        SharpnessAware(rho, self.adaptive, eta)  # refuses bad settings now, not in the first round
        self.rho, self.eta = rho, eta

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        return replace(plan, rule=SharpnessAware(self.rho, self.adaptive, self.eta))


class FedASAM(FedSAM):
    """FedAvg whose clients take ASAM steps: ascent rho T^2 g / ||T g||, T = |w| + eta (Kwon et al. 2021).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedASAM
      init_args: {rho: 0.5, eta: 0.01}
    ```

    Examples:
        >>> from lightfed.strategies import FedASAM
        >>> strategy = FedASAM()
        >>> strategy.rho, strategy.eta, strategy.adaptive
        (0.5, 0.01, True)
    """

    adaptive = True

    def __init__(self, rho: float = 0.5, eta: float = 0.01, server_lr: float = 1.0) -> None:
        super().__init__(rho=rho, eta=eta, server_lr=server_lr)
