"""FedOpt (Reddi et al. 2021, Algorithm 2): FedAdagrad, FedAdam and FedYogi, adaptive server optimisers."""

import math
from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch import Tensor

from lightfed.errors import ConfigError
from lightfed.strategies.base import ServerContext
from lightfed.strategies.fedavg import FedAvg


def adagrad_second_moment(v: Tensor, delta: Tensor, beta2: float) -> None:
    v.add_(delta.square())


def adam_second_moment(v: Tensor, delta: Tensor, beta2: float) -> None:
    v.mul_(beta2).add_(delta.square(), alpha=1 - beta2)


def yogi_second_moment(v: Tensor, delta: Tensor, beta2: float) -> None:
    square = delta.square()
    v.sub_((1 - beta2) * square * torch.sign(v - square))


def bias_corrected_lr(server_lr: float, beta1: float, beta2: float, step: int) -> float:
    """Adam's eta sqrt(1 - b2^t) / (1 - b1^t) at step t >= 1 (Kingma and Ba 2014)."""
    return server_lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)


class FedOpt(FedAvg):
    """m <- b1 m + (1 - b1) D;  v <- (rule of the subclass);  x <- x + eta m / (sqrt(v) + tau),
    with D the uniform mean of the client deltas, m_0 = 0 and v_0 = tau^2 (no bias correction, as in the paper).

    The options give the released TFF code (``weighting="examples"``) and Flower's FedAdam (``weighting="examples"``,
    ``bias_correction="flower"``, ``initial_v="zero"``); see docs/corrections/baselines.md.
    """

    second_moment = staticmethod(adam_second_moment)

    def __init__(
        self,
        server_lr: float = 0.01,
        beta1: float = 0.9,
        beta2: float = 0.99,
        tau: float = 1e-3,
        weighting: Literal["uniform", "examples"] = "uniform",
        bias_correction: Literal["none", "adam", "flower"] = "none",
        initial_v: Literal["tau_squared", "zero"] = "tau_squared",
    ) -> None:
        """
        Args:
            server_lr: Server learning rate eta.
            beta1: First-moment decay.
            beta2: Second-moment decay (unused by FedAdagrad).
            tau: Adaptivity: added to sqrt(v).
            weighting: D is the uniform mean of the deltas (the paper), or weighted by examples (its TFF code, Flower).
            bias_correction: Scale eta by sqrt(1 - b2^t) / (1 - b1^t): "adam" at the t-th aggregation (Kingma and Ba's
                t = 1 first), "flower" one step later (Flower's FedAdam: t = server_round + 1, its rounds from 1).
            initial_v: v_0 = tau^2 (the paper) or 0 (Flower).
        """
        super().__init__(server_lr=server_lr, weighting=weighting)
        for name, value in [("beta1", beta1), ("beta2", beta2)]:
            if not 0 <= value < 1:
                raise ConfigError(f"strategy.{name} must be in [0, 1), got {value}")
        if tau <= 0:
            raise ConfigError(f"strategy.tau must be > 0, got {tau}")
        self.beta1, self.beta2, self.tau = beta1, beta2, tau
        self.bias_correction, self.initial_v = bias_correction, initial_v

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        self.m = torch.zeros_like(context.params)
        self.v = torch.full_like(context.params, self.tau**2 if self.initial_v == "tau_squared" else 0.0)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        delta = (sums["delta"] / sums["weight"]).to(params.dtype)
        self.m.mul_(self.beta1).add_(delta, alpha=1 - self.beta1)
        self.second_moment(self.v, delta, self.beta2)
        lr = self.server_lr
        if self.bias_correction != "none":
            step = round + (1 if self.bias_correction == "adam" else 2)
            lr = bias_corrected_lr(self.server_lr, self.beta1, self.beta2, step)
        return params + lr * self.m / (self.v.sqrt() + self.tau)

    def state_dict(self) -> dict[str, Any]:
        return {"m": self.m, "v": self.v}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.m.copy_(state["m"])
        self.v.copy_(state["v"])


class FedAdam(FedOpt):
    """v <- b2 v + (1 - b2) D^2."""


class FedYogi(FedOpt):
    """v <- v - (1 - b2) D^2 sign(v - D^2)."""

    second_moment = staticmethod(yogi_second_moment)


class FedAdagrad(FedOpt):
    """v <- v + D^2."""

    second_moment = staticmethod(adagrad_second_moment)
