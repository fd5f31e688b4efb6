"""FADAS (Wang et al., ICML 2024): adaptive (AMSGrad) server steps on buffered asynchronous updates, with a
delay-adaptive learning rate."""

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from lightfed.errors import ConfigError
from lightfed.strategies.base import ServerContext
from lightfed.strategies.fedbuff import FedBuff


class FADAS(FedBuff):
    """D = mean of the S buffered deltas; m <- b1 m + (1 - b1) D; v <- b2 v + (1 - b2) D^2; v_hat <- max(v_hat, v);
    x <- x + server_lr * lam / (1 - b1^t) * m / (sqrt(v_hat / (1 - b2^t)) + eps), t the aggregation count.
    lam = 1 / tau_max when the buffer's largest staleness tau_max exceeds ``delay_threshold``, else 1.
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
        tau_max = max(staleness)
        self.scale = 1 / tau_max if self.delay_adaptive and tau_max > self.delay_threshold else 1.0
        delta = (sums["delta"] / sums["count"]).to(params.dtype)
        self.m.mul_(self.beta1).add_(delta, alpha=1 - self.beta1)
        self.v.mul_(self.beta2).add_(delta.square(), alpha=1 - self.beta2)
        torch.maximum(self.v_hat, self.v, out=self.v_hat)
        step = round + 1
        denominator = (self.v_hat / (1 - self.beta2**step)).sqrt().add_(self.eps)
        return params + self.server_lr * self.scale / (1 - self.beta1**step) * self.m / denominator

    def metrics(self) -> dict[str, float]:
        return {"delay_scale": self.scale}

    def state_dict(self) -> dict[str, Any]:
        return {"m": self.m, "v": self.v, "v_hat": self.v_hat}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("m", "v", "v_hat"):
            getattr(self, name).copy_(state[name])
