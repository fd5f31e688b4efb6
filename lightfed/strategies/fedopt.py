"""FedOpt (Reddi et al. 2021, Algorithm 2): FedAdagrad, FedAdam and FedYogi, adaptive server optimisers."""

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from lightfed.errors import ConfigError
from lightfed.strategies.base import ServerContext
from lightfed.strategies.fedavg import FedAvg


@dataclass(frozen=True)
class FedOptSettings:
    """The constants of one FedOpt server step."""

    lr: float  # eta of this step (bias-corrected where the strategy corrects)
    beta1: float  # first-moment decay
    beta2: float  # second-moment decay (unused by FedAdagrad)
    tau: float  # adaptivity: added to sqrt(v)


def first_moment(m: Tensor, delta: Tensor, beta1: float) -> Tensor:
    """b1 m + (1 - b1) D, as a new tensor."""
    return m.mul(beta1).add_(delta, alpha=1 - beta1)


def adagrad_second_moment(v: Tensor, delta: Tensor, beta2: float) -> Tensor:
    """v + D^2, as a new tensor (``beta2`` unused)."""
    return v.add(delta.square())


def adam_second_moment(v: Tensor, delta: Tensor, beta2: float) -> Tensor:
    """b2 v + (1 - b2) D^2, as a new tensor."""
    return v.mul(beta2).add_(delta.square(), alpha=1 - beta2)


def yogi_second_moment(v: Tensor, delta: Tensor, beta2: float) -> Tensor:
    """v - (1 - b2) D^2 sign(v - D^2), as a new tensor."""
    square = delta.square()
    return v.sub((1 - beta2) * square * torch.sign(v - square))


SecondMoment = Callable[[Tensor, Tensor, float], Tensor]


def fedopt_step(
    params: Tensor, delta: Tensor, m: Tensor, v: Tensor, settings: FedOptSettings, second_moment: SecondMoment
) -> tuple[Tensor, Tensor, Tensor]:
    """One FedOpt server step from the mean client delta D: m+ = b1 m + (1 - b1) D, v+ = ``second_moment``(v, D, b2),
    x+ = x + lr m+ / (sqrt(v+) + tau). Returns (x+, m+, v+), new tensors; the arguments are left unchanged."""
    m = first_moment(m, delta, settings.beta1)
    v = second_moment(v, delta, settings.beta2)
    return params + settings.lr * m / (v.sqrt() + settings.tau), m, v


def adagrad_step(
    params: Tensor, delta: Tensor, m: Tensor, v: Tensor, settings: FedOptSettings
) -> tuple[Tensor, Tensor, Tensor]:
    """FedAdagrad's step (``fedopt_step`` with v+ = v + D^2): (x+, m+, v+)."""
    return fedopt_step(params, delta, m, v, settings, adagrad_second_moment)


def adam_step(
    params: Tensor, delta: Tensor, m: Tensor, v: Tensor, settings: FedOptSettings
) -> tuple[Tensor, Tensor, Tensor]:
    """FedAdam's step (``fedopt_step`` with v+ = b2 v + (1 - b2) D^2): (x+, m+, v+)."""
    return fedopt_step(params, delta, m, v, settings, adam_second_moment)


def yogi_step(
    params: Tensor, delta: Tensor, m: Tensor, v: Tensor, settings: FedOptSettings
) -> tuple[Tensor, Tensor, Tensor]:
    """FedYogi's step (``fedopt_step`` with v+ = v - (1 - b2) D^2 sign(v - D^2)): (x+, m+, v+)."""
    return fedopt_step(params, delta, m, v, settings, yogi_second_moment)


def bias_corrected_lr(server_lr: float, beta1: float, beta2: float, step: int) -> float:
    """Adam's eta sqrt(1 - b2^t) / (1 - b1^t) at step t >= 1 (Kingma and Ba 2014)."""
    return server_lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)


BiasCorrection = Literal["none", "adam", "flower"]


def fedopt_lr(server_lr: float, beta1: float, beta2: float, bias_correction: BiasCorrection, round: int) -> float:
    """The learning rate of the step that ends round ``round`` (from 0): ``server_lr`` uncorrected, else
    ``bias_corrected_lr`` at t = round + 1 ("adam") or t = round + 2 ("flower")."""
    if bias_correction == "none":
        return server_lr
    return bias_corrected_lr(server_lr, beta1, beta2, round + (1 if bias_correction == "adam" else 2))


class FedOpt(FedAvg):
    """m <- b1 m + (1 - b1) D;  v <- (rule of the subclass);  x <- x + eta m / (sqrt(v) + tau),
    with D the uniform mean of the client deltas, m_0 = 0 and v_0 = tau^2 (no bias correction, as in the paper).

    The options give the released TFF code (``weighting="examples"``) and Flower's FedAdam (``weighting="examples"``,
    ``bias_correction="flower"``, ``initial_v="zero"``); see docs/corrections/baselines.md.

    In a config, one of its subclasses:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedAdam
      init_args: {server_lr: 0.01, tau: 0.001}
    ```

    Examples:
        The second moment starts at tau^2, or at 0 as in Flower:

        >>> import torch
        >>> from lightfed.strategies import FedOpt, ServerContext
        >>> strategy = FedOpt(tau=1e-3)
        >>> strategy.setup(ServerContext(torch.zeros(2), num_clients=4))
        >>> strategy.v
        tensor([1.0000e-06, 1.0000e-06])
        >>> flower = FedOpt(weighting="examples", bias_correction="flower", initial_v="zero")
        >>> flower.setup(ServerContext(torch.zeros(2), num_clients=4))
        >>> flower.v
        tensor([0., 0.])
        >>> FedOpt(beta1=1.0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: strategy.beta1 must be in [0, 1), got 1.0
    """

    server_step = staticmethod(adam_step)

    def __init__(
        self,
        server_lr: float = 0.01,
        beta1: float = 0.9,
        beta2: float = 0.99,
        tau: float = 1e-3,
        weighting: Literal["uniform", "examples"] = "uniform",
        bias_correction: BiasCorrection = "none",
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

        Raises:
            ConfigError: ``server_lr`` or ``tau`` is not positive, or ``beta1`` or ``beta2`` is outside [0, 1).
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
        lr = fedopt_lr(self.server_lr, self.beta1, self.beta2, self.bias_correction, round)
        settings = FedOptSettings(lr, self.beta1, self.beta2, self.tau)
        params, self.m, self.v = self.server_step(params, delta, self.m, self.v, settings)
        return params

    def state_dict(self) -> dict[str, Any]:
        return {"m": self.m, "v": self.v}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.m.copy_(state["m"])
        self.v.copy_(state["v"])


class FedAdam(FedOpt):
    """v <- b2 v + (1 - b2) D^2.

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedAdam
      init_args: {server_lr: 0.01, tau: 0.001}
    ```

    Examples:
        The first step is about ``server_lr`` long, whatever the size of the mean delta:

        >>> import torch
        >>> from lightfed.strategies import FedAdam, ServerContext
        >>> strategy = FedAdam(server_lr=0.01)
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=1))
        >>> sums = {"delta": torch.tensor([1.0]), "weight": torch.tensor(1.0)}  # a round's sums (sum_sizes)
        >>> strategy.aggregate(torch.zeros(1), sums, round=0)
        tensor([0.0099])
        >>> strategy.m, strategy.v
        (tensor([0.1000]), tensor([0.0100]))
    """


class FedYogi(FedOpt):
    """v <- v - (1 - b2) D^2 sign(v - D^2).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedYogi
      init_args: {server_lr: 0.03, tau: 0.001}
    ```

    Examples:
        >>> from lightfed.strategies import FedYogi
        >>> FedYogi.server_step.__name__
        'yogi_step'
        >>> FedYogi(tau=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: strategy.tau must be > 0, got 0
    """

    server_step = staticmethod(yogi_step)


class FedAdagrad(FedOpt):
    """v <- v + D^2.

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedAdagrad
      init_args: {server_lr: 0.03, tau: 0.001}
    ```

    Examples:
        The second moment sums the squared mean deltas:

        >>> import torch
        >>> from lightfed.strategies import FedAdagrad, ServerContext
        >>> strategy = FedAdagrad(tau=1e-3)
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=1))
        >>> sums = {"delta": torch.tensor([2.0]), "weight": torch.tensor(1.0)}  # a round's sums (sum_sizes)
        >>> params = torch.zeros(1)
        >>> for step in range(2):
        ...     params = strategy.aggregate(params, sums, round=step)
        >>> strategy.v  # tau^2 + 2^2 + 2^2
        tensor([8.0000])
    """

    server_step = staticmethod(adagrad_step)
