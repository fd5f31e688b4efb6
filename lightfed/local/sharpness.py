"""SAM/ASAM as a local rule: the client's own optimizer steps with the gradient taken at w + e(w) (FedSAM, FedASAM and
ADAPT-FED's clients)."""

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule
from lightfed.errors import ConfigError
from lightfed.optim.sam import check_sam_settings, sam_perturbation


class SharpnessAware(LocalRule):
    """Replaces each step's gradient g(w) by g(w + e(w)), e from ``sam_perturbation``; the same batch is evaluated
    twice, and the running statistics move in both passes. Under DP-SGD both gradients are private (see
    ``lightfed.privacy.DPSGD``).

    ``FedSAM`` and ``FedASAM`` give it to every client; in a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedSAM
      init_args: {rho: 0.05}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.local import SharpnessAware
        >>> rule = SharpnessAware(rho=0.5)
        >>> rule.gradients_per_step
        2
        >>> rule.second_point(params=torch.zeros(2), grad=torch.tensor([3.0, 4.0]))  # w + rho g / ||g||
        tensor([0.3000, 0.4000])
        >>> SharpnessAware(rho=-1.0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: SAM's rho must be >= 0, got -1.0
    """

    vectorizes = True  # w + e(w) is its second point, evaluated for many clients at once (e from the row's norm)
    keeps_second_statistics = True

    def __init__(self, rho: float = 0.05, adaptive: bool = False, eta: float = 0.01) -> None:
        """
        Args:
            rho: Radius of the ascent step (0: plain steps, one gradient a step).
            adaptive: ASAM's ascent instead of SAM's.
            eta: ASAM's offset of the scale |w| + eta.

        Raises:
            ConfigError: ``rho`` or ``eta`` is negative.
        """
        check_sam_settings(rho, eta)
        self.rho, self.adaptive, self.eta = rho, adaptive, eta
        self.gradients_per_step = 2 if rho > 0 else 1

    def start(self, params: Tensor, context: LocalContext) -> None:
        """Keeps the client's context for the second gradient of each step.

        Raises:
            ConfigError: the client's gradients are scaled (``16-mixed`` precision's gradient scaler).
        """
        if context.scales_gradients:
            raise ConfigError(
                "sharpness-aware steps need unscaled gradients: use trainer.precision 32-true or bf16-mixed"
            )
        self.context = context
        self._saved = torch.empty_like(params)

    def second_point(self, params: Tensor, grad: Tensor) -> Tensor | None:
        """w + e(w) (None for rho 0: plain steps)."""
        if self.rho == 0:
            return None
        return params + sam_perturbation(grad, params, self.rho, self.adaptive, self.eta)

    def at_second_point(self, grad: Tensor, params: Tensor, lr: float) -> Tensor:
        return grad  # the step's gradient is the one at w + e(w)

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        point = self.second_point(params, grad)
        if point is None:
            return
        with torch.no_grad():
            self._saved.copy_(params)
            params.copy_(point)
        self.context.recompute_gradient()  # grad now holds the gradient at w + e(w)
        with torch.no_grad():
            params.copy_(self._saved)
