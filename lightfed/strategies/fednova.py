"""FedNova (Wang et al. 2020): normalised averaging that removes the objective inconsistency of unequal local work."""

from collections.abc import Mapping

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
    """

    requirements = Requirements(plain_sgd=True)  # its normalisation counts steps of length lr

    def sum_sizes(self) -> dict[str, int]:
        return {"normalised": self.num_params, "time": 1, "weight": 1}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        weight = self.client_weight(update)
        sums.add("normalised", update.delta, weight=weight / update.local_time)
        sums.add("time", update.local_time, weight=weight)
        sums.add("weight", weight)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        return fednova_step(params, sums["normalised"], float(sums["time"]), float(sums["weight"]), self.server_lr)
