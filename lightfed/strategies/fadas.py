"""FADAS (Wang et al., ICML 2024): adaptive (AMSGrad) server steps on buffered asynchronous updates, with a
delay-adaptive learning rate."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lightfed.errors import ConfigError
from lightfed.strategies.base import ServerContext
from lightfed.strategies.fedbuff import FedBuff
from lightfed.strategies.fedopt import adam_second_moment, first_moment


@dataclass(frozen=True)
class AMSGradSettings:
    """The constants of FADAS's server steps."""

    server_lr: float  # global step size gamma
    beta1: float  # first-moment decay
    beta2: float  # second-moment decay
    eps: float  # added to the denominator


def delay_scale(staleness: Sequence[int], delay_adaptive: bool, delay_threshold: int) -> float:
    """FADAS's lam: 1 / tau_max when ``delay_adaptive`` and the largest staleness tau_max exceeds ``delay_threshold``,
    else 1. ``staleness``: the buffer's stalenesses (at least one)."""
    tau_max = max(staleness)
    return 1 / tau_max if delay_adaptive and tau_max > delay_threshold else 1.0


def amsgrad_step(
    params: Tensor,
    delta: Tensor,
    m: Tensor,
    v: Tensor,
    v_hat: Tensor,
    step: int,
    scale: float,
    settings: AMSGradSettings,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """FADAS's t-th server step (t = ``step`` >= 1) from the buffer's mean delta D: m+ = b1 m + (1 - b1) D,
    v+ = b2 v + (1 - b2) D^2, v_hat+ = max(v_hat, v+) and
    x+ = x + server_lr * scale / (1 - b1^t) * m+ / (sqrt(v_hat+ / (1 - b2^t)) + eps).
    Returns (x+, m+, v+, v_hat+), new tensors; the arguments are left unchanged."""
    m = first_moment(m, delta, settings.beta1)
    v = adam_second_moment(v, delta, settings.beta2)
    v_hat = torch.maximum(v_hat, v)
    denominator = (v_hat / (1 - settings.beta2**step)).sqrt().add_(settings.eps)
    return params + settings.server_lr * scale / (1 - settings.beta1**step) * m / denominator, m, v, v_hat


class FADAS(FedBuff):
    """D = mean of the S buffered deltas; m <- b1 m + (1 - b1) D; v <- b2 v + (1 - b2) D^2; v_hat <- max(v_hat, v);
    x <- x + server_lr * lam / (1 - b1^t) * m / (sqrt(v_hat / (1 - b2^t)) + eps), t the aggregation count.
    lam = 1 / tau_max when the buffer's largest staleness tau_max exceeds ``delay_threshold``, else 1.

    In a config, with an ``asynchronous:`` section:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FADAS
      init_args: {server_lr: 0.01, delay_threshold: 1}
    ```

    Examples:
        A buffer whose oldest update is four versions old: the step is divided by 4.

        >>> import torch
        >>> from lightfed.strategies import FADAS, ServerContext
        >>> strategy = FADAS()
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=2))
        >>> sums = {"delta": torch.tensor([2.0]), "count": torch.tensor(2.0)}  # a buffer's sums (sum_sizes)
        >>> params = strategy.aggregate(torch.zeros(1), sums, round=0, staleness=[0, 4])
        >>> strategy.metrics()
        {'delay_scale': 0.25}
    """

    def __init__(
        self,
        server_lr: float = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.99,
        eps: float = 1e-8,
        delay_adaptive: bool = True,
        delay_threshold: int = 1,
    ) -> None:
        """
        Args:
            server_lr: Global step size gamma.
            beta1: First-moment decay.
            beta2: Second-moment decay.
            eps: Added to the denominator.
            delay_adaptive: Divide the step by the buffer's largest staleness when it exceeds ``delay_threshold``.
            delay_threshold: Staleness above which the step is divided (FADAS's tau_c).

        Raises:
            ConfigError: ``server_lr`` or ``eps`` is not positive, or ``beta1`` or ``beta2`` is outside [0, 1).
        """
        super().__init__(server_lr=server_lr)
        for name, value in [("beta1", beta1), ("beta2", beta2)]:
            if not 0 <= value < 1:
                raise ConfigError(f"strategy.{name} must be in [0, 1), got {value}")
        if eps <= 0:
            raise ConfigError(f"strategy.eps must be > 0, got {eps}")
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.delay_adaptive, self.delay_threshold = delay_adaptive, delay_threshold

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        self.m, self.v, self.v_hat = (torch.zeros_like(context.params) for _ in range(3))
        self.scale = 1.0

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int, staleness: Sequence[int]) -> Tensor:
        self.scale = delay_scale(staleness, self.delay_adaptive, self.delay_threshold)
        delta = (sums["delta"] / sums["count"]).to(params.dtype)
        settings = AMSGradSettings(self.server_lr, self.beta1, self.beta2, self.eps)
        params, self.m, self.v, self.v_hat = amsgrad_step(
            params, delta, self.m, self.v, self.v_hat, round + 1, self.scale, settings
        )
        return params

    def metrics(self) -> dict[str, float]:
        return {"delay_scale": self.scale}

    def state_dict(self) -> dict[str, Any]:
        return {"m": self.m, "v": self.v, "v_hat": self.v_hat}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("m", "v", "v_hat"):
            getattr(self, name).copy_(state[name])
