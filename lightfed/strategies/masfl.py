"""MasFL (Yan et al., ICML 2025, Algorithms 1-2): asynchronous FL with momentum and control variates; the server
rebuilds the descent direction from its fresh state and only the clients' gradient information."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.requirements import Requirements, Sent
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies.async_base import AsyncSetting, AsyncStrategy
from lightfed.strategies.base import NOTHING, ServerContext

EPS = 1e-12  # guards the normalisation of a zero direction


class MomentumCorrection(LocalRule):
    """Replaces the gradient by g = beta * grad + offset (MasFL: offset = u - beta * c_i, with u = beta c + (1 - beta) g
    the server's broadcast); with ``normalise``, by g / ||g|| over all parameters (AdaMasFL), so every step of plain
    SGD has length exactly its learning rate.

    Reports ``grad_mean``: the mean of the raw gradients along the local trajectory (the client's next control
    variate c_i). Needs plain SGD (no momentum or weight decay): the rule is the whole update direction.
    """

    requirements = Requirements(plain_sgd=True, no_weight_decay=True, sends=frozenset({Sent("grad_mean", "gradients")}))
    vectorizes = True  # elementwise, and the norm is the row's own

    def __init__(self, beta: float, offset: Tensor | None, normalise: bool = False) -> None:
        """``offset`` None adds nothing (the warm-up, where only the raw gradients are wanted)."""
        self.beta, self.offset, self.normalise = beta, offset, normalise

    def start(self, params: Tensor, context: LocalContext) -> None:
        self.grad_sum = torch.zeros_like(params)
        self.steps = 0

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        self.grad_sum.add_(grad)
        self.steps += 1
        if self.offset is not None:
            grad.mul_(self.beta).add_(self.offset)
        if self.normalise:
            grad.div_(grad.norm().clamp_min(EPS))

    def report(self) -> dict[str, Any]:
        return {"grad_mean": self.grad_sum / max(self.steps, 1)}


def masfl_state_step(
    c: Tensor, g: Tensor, dc: Tensor, count: Tensor | float, num_clients: int, beta: float
) -> tuple[Tensor, Tensor]:
    """MasFL's server state after an aggregation (Algorithm 1, lines 5 and 7), from dc = sum over the S = ``count``
    buffered updates of (c_i+ - c_i): g+ = beta (dc / S + c) + (1 - beta) g, from the old c, and c+ = c + dc / N.
    Returns (c+, g+), new tensors."""
    g = g.mul(1 - beta).add_(beta * (dc / count + c))
    return c.add(dc / num_clients), g


class MasFL(AsyncStrategy):
    """Clients step along beta (grad - c_i + c) + (1 - beta) g, with the c and g of the version they started from,
    and upload c_i+ = the mean raw gradient along their trajectory. Server, with dc = sum over the buffer of
    (c_i+ - c_i):  g <- beta (dc / S + c) + (1 - beta) g;  x <- x - server_lr g;  c <- c + dc / N.

    Before the first aggregation every client uploads c_i = the mean of K minibatch gradients at x_0; c = mean_i c_i
    and g = c. Beta weights the new information (the opposite of PyTorch's momentum); by default
    beta = min(1, sqrt(S K / T)) (Theorem 1). The local step size is the optimizer's learning rate (plain SGD).

    Memory: one control variate c_i (d floats) per client, on the CPU.

    In a config, with an ``asynchronous:`` section and a fixed ``trainer.local_steps``:

    ```yaml
    strategy:
      class_path: lightfed.strategies.MasFL
      init_args: {server_lr: 1.0, beta: null}
    ```

    Examples:
        The default beta from S = 5 updates a buffer, K = 10 local steps and T = 100 aggregations:

        >>> from lightfed.strategies import AsyncSetting, MasFL
        >>> strategy = MasFL()
        >>> strategy.configure_async(AsyncSetting(buffer_size=5, local_steps=10, rounds=100))
        >>> round(strategy.beta, 4)
        0.7071
        >>> MasFL().configure_async(AsyncSetting(buffer_size=5, local_steps=None, rounds=100))
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: MasFL's default beta = sqrt(S K / T) needs a fixed trainer.local_steps (K); ...
    """

    requirements = Requirements(client_state=True) | MomentumCorrection.requirements
    warms_up = True
    normalise = False

    def __init__(self, server_lr: float = 1.0, beta: float | None = None) -> None:
        """
        Args:
            server_lr: Global step size gamma.
            beta: Momentum weight of new information in (0, 1]; null: min(1, sqrt(S K / T)).

        Raises:
            ConfigError: ``server_lr`` is not positive or ``beta`` is outside (0, 1].
        """
        if server_lr <= 0:
            raise ConfigError(f"strategy.server_lr must be > 0, got {server_lr}")
        if beta is not None and not 0 < beta <= 1:
            raise ConfigError(f"strategy.beta must be in (0, 1], got {beta}")
        self.server_lr = server_lr
        self.beta_setting = beta

    def configure_async(self, setting: AsyncSetting) -> None:
        """Sets beta: the given one, or min(1, sqrt(S K / T)).

        Raises:
            ConfigError: beta is not given and the jobs' number of local steps K varies.
        """
        super().configure_async(setting)
        if self.beta_setting is not None:
            self.beta = self.beta_setting
        elif setting.local_steps is None:
            raise ConfigError(
                f"{type(self).__name__}'s default beta = sqrt(S K / T) needs a fixed trainer.local_steps (K); "
                "set it, or set strategy.beta"
            )
        else:
            self.beta = theory_beta(setting.buffer_size, setting.local_steps, setting.rounds)

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        self.c = torch.zeros_like(context.params)
        self.g = torch.zeros_like(context.params)

    def package(self) -> dict[str, Tensor]:
        return {"u": self.beta * self.c + (1 - self.beta) * self.g}

    def _variate(self, client_id: int, like: Tensor) -> Tensor:
        c_i = self.client_states.get(client_id, "c")
        return torch.zeros_like(like) if c_i is None else c_i.to(like.device)

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        u = received["u"]
        offset = u - self.beta * self._variate(plan.client_id, u)
        return replace(plan, rule=MomentumCorrection(self.beta, offset, normalise=self.normalise))

    def configure_warm_up(self, plan: ClientPlan) -> ClientPlan:
        return replace(plan, lr=0.0, rule=MomentumCorrection(1.0, None))  # gradients at x_0, no step

    def sum_sizes(self) -> dict[str, int]:
        return {"dc": self.num_params, "count": 1}

    def accumulate(self, sums: Sums, update: ClientUpdate, staleness: int) -> None:
        self._add_variate(sums, update)

    def accumulate_warm_up(self, sums: Sums, update: ClientUpdate) -> None:
        self._add_variate(sums, update)

    def _add_variate(self, sums: Sums, update: ClientUpdate) -> None:
        """The client's new control variate c_i+ replaces its c_i; their difference goes into the sums."""
        new = update.report["grad_mean"]
        sums.add("dc", new - self._variate(update.client_id, new))
        sums.add("count", 1)
        self.client_states.set(update.client_id, "c", new)

    def finish_warm_up(self, sums: Mapping[str, Tensor]) -> None:
        self.c.copy_(sums["dc"] / self.num_clients)
        self.g.copy_(self.c)

    def _update_state(self, sums: Mapping[str, Tensor]) -> None:
        dc, count = sums["dc"].to(self.c.dtype), sums["count"].to(self.c.dtype)
        self.c, self.g = masfl_state_step(self.c, self.g, dc, count, self.num_clients, self.beta)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int, staleness: Sequence[int]) -> Tensor:
        self._update_state(sums)
        return params - self.server_lr * self.g

    def metrics(self) -> dict[str, float]:
        return {"c_norm": self.c.norm().item(), "g_norm": self.g.norm().item(), "beta": self.beta}

    def state_dict(self) -> dict[str, Any]:
        return {"c": self.c, "g": self.g}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.c.copy_(state["c"])
        self.g.copy_(state["g"])


def theory_beta(buffer_size: int, local_steps: int, rounds: int) -> float:
    """beta = sqrt(S K / T), clipped to 1 when T < S K."""
    return min(1.0, math.sqrt(buffer_size * local_steps / rounds))
