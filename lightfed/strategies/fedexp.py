"""FedExP (Jhunjhunwala et al. 2023): an extrapolated server step from the clients' disagreement (POCS view)."""

from collections.abc import Mapping
from typing import Any, Literal

from torch import Tensor

from lightfed.core.messages import ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies.base import ServerContext
from lightfed.strategies.fedavg import FedAvg


def fedexp_server_lr(sum_sq_norms: float, mean_delta_sq_norm: float, weight_sum: float, eps: float) -> float:
    """max(1, sum_i w_i ||D_i||^2 / (2 W (||mean D||^2 + eps))), W = sum_i w_i (w_i = 1: W = M, the paper)."""
    return max(1.0, sum_sq_norms / (2 * weight_sum * (mean_delta_sq_norm + eps)))


class FedExP(FedAvg):
    """x <- x + eta_g mean(D_i), with eta_g = max(1, sum ||D_i||^2 / (2 M (||mean D||^2 + eps))) and uniform mean.

    The options give the authors' released code (``weighting="examples"``, ``eps_times_clients=True``,
    ``eps_decay=0.998**2``, ``evaluate="average_last_two"``); see docs/corrections/baselines.md.

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedExP
      init_args: {eps: 0.001}
    ```

    Examples:
        Two clients that disagree: the server steps more than 1 along their mean delta.

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.strategies import FedExP, ServerContext
        >>> strategy = FedExP(eps=1e-3)
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=2))
        >>> sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        >>> for client, delta in enumerate([3.0, -1.0]):
        ...     update = ClientUpdate(client, torch.tensor([delta]), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0))
        ...     strategy.accumulate(sums, update)
        >>> strategy.aggregate(torch.zeros(1), sums, round=0)  # 10 / (2 x 2 x (1 + eps)) x the mean delta 1
        tensor([2.4975])
        >>> round(strategy.metrics()["server_lr"], 4)
        2.4975
    """

    requirements = Requirements(reads_each_update=True)  # its step size reads each client's squared delta norm

    def __init__(
        self,
        eps: float = 1e-3,
        weighting: Literal["uniform", "examples"] = "uniform",
        eps_times_clients: bool = False,
        eps_decay: float = 1.0,
        evaluate: Literal["last", "average_last_two"] = "last",
    ) -> None:
        """
        Args:
            eps: Keeps the extrapolation bounded when the mean delta is small.
            weighting: The means over clients (of D_i and of ||D_i||^2) uniform (the paper) or by examples.
            eps_times_clients: Use M eps in place of eps, M the round's number of clients (the released code).
            eps_decay: eps is multiplied by this before every round: eps eps_decay^(t + 1) in round t (from 0).
            evaluate: Evaluate the last iterate, or the mean of the last two (x_t + x_{t+1}) / 2 after the first
                round (the released code; the algorithm continues from the last either way).
        """
        if eps <= 0:
            raise ConfigError(f"strategy.eps must be > 0, got {eps}")
        if not 0 < eps_decay <= 1:
            raise ConfigError(f"strategy.eps_decay must be in (0, 1], got {eps_decay}")
        super().__init__(server_lr=1.0, weighting=weighting)
        self.eps, self.eps_times_clients, self.eps_decay, self.evaluate = eps, eps_times_clients, eps_decay, evaluate
        self.last_server_lr = 1.0

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        self.previous = context.params.new_empty(0)  # x_t before the last step (average_last_two; empty: none)

    def sum_sizes(self) -> dict[str, int]:
        return {**super().sum_sizes(), "sq_norms": 1, "clients": 1}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        super().accumulate(sums, update)
        sums.add("sq_norms", update.delta.square().sum(), weight=self.client_weight(update))
        sums.add("clients", 1)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        weight_sum = float(sums["weight"])
        mean_delta = sums["delta"] / weight_sum
        eps = self.eps * self.eps_decay ** (round + 1)
        if self.eps_times_clients:
            eps *= float(sums["clients"])
        self.last_server_lr = fedexp_server_lr(
            float(sums["sq_norms"]), float(mean_delta.square().sum()), weight_sum, eps
        )
        if self.evaluate == "average_last_two":
            self.previous = params.clone() if round > 0 else params.new_empty(0)
        return params + self.last_server_lr * mean_delta.to(params.dtype)

    def evaluated(self, params: Tensor) -> Tensor:
        if self.previous.numel() == 0:
            return params
        return (params + self.previous) / 2

    def metrics(self) -> dict[str, float]:
        return {"server_lr": self.last_server_lr}

    def state_dict(self) -> dict[str, Any]:
        if self.evaluate == "average_last_two":
            return {"last_server_lr": self.last_server_lr, "previous": self.previous}
        return {"last_server_lr": self.last_server_lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.last_server_lr = state["last_server_lr"]
        if self.evaluate == "average_last_two":
            self.previous = state["previous"].to(self.previous.device)
