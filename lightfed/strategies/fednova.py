"""FedNova (Wang et al. 2020): normalised averaging that removes the objective inconsistency of unequal local work."""

from collections.abc import Mapping
from typing import Literal

from torch import Tensor

from lightfed.core.messages import ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.sums import Sums
from lightfed.strategies.fedavg import FedAvg


def fednova_step(
    params: Tensor, normalised_sum: Tensor, weighted_time: float, weight_sum: float, server_lr: float
) -> Tensor:
    """x + server_lr * tau_eff * sum_i p_i delta_i / T_i, with tau_eff = sum_i p_i T_i and p_i = w_i / sum w."""
    tau_eff = weighted_time / weight_sum
    return params + server_lr * tau_eff * (normalised_sum / weight_sum).to(params.dtype)


class FedNova(FedAvg):
    """Each client's delta is divided by its local time T_i (the sum of its step sizes: lr x steps for SGD), then
    the weighted mean (weights p_i as in FedAvg) is rescaled by the weighted mean T_i. With equal local work this is FedAvg.

    T_i is the plain-SGD normaliser; with client momentum rho the paper's a_i = sum_k (1 - rho^k)/(1 - rho) differs.

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedNova
      init_args: {normalise_by: local_time}
    ```

    Examples:
        One client takes four steps of size 1, the other one: FedAvg's mean delta would be 1.5.

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.strategies import FedNova, ServerContext
        >>> strategy = FedNova()
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=2))
        >>> sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        >>> for client, (delta, steps) in enumerate([(2.0, 4), (1.0, 1)]):
        ...     update = ClientUpdate(client, torch.tensor([delta]), torch.zeros(0), 10, steps, steps, torch.tensor(0.0))
        ...     strategy.accumulate(sums, update)
        >>> strategy.aggregate(torch.zeros(1), sums, round=0)  # 2.5 x the mean of 2 / 4 and 1 / 1
        tensor([1.8750])
    """

    requirements = Requirements(plain_sgd=True, reads_each_update=True)  # normalises each delta by its steps of lr

    def __init__(
        self,
        server_lr: float = 1.0,
        weighting: Literal["examples", "uniform"] = "examples",
        normalise_by: Literal["local_time", "steps"] = "local_time",
    ) -> None:
        """
        Args:
            server_lr: Scale of the normalised average applied to the global model.
            weighting: p_i proportional to the client's examples, or uniform.
            normalise_by: T_i is the sum of the client's step sizes (the paper's a_i) or its number of steps (the
                released code); they differ when clients' learning rates differ.
        """
        super().__init__(server_lr=server_lr, weighting=weighting)
        self.normalise_by = normalise_by

    def normaliser(self, update: ClientUpdate) -> float:
        return update.local_time if self.normalise_by == "local_time" else float(update.num_steps)

    def sum_sizes(self) -> dict[str, int]:
        return {"normalised": self.num_params, "time": 1, "weight": 1}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        weight, normaliser = self.client_weight(update), self.normaliser(update)
        sums.add("normalised", update.delta, weight=weight / normaliser)
        sums.add("time", normaliser, weight=weight)
        sums.add("weight", weight)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        return fednova_step(params, sums["normalised"], float(sums["time"]), float(sums["weight"]), self.server_lr)
