"""FedAvg (McMahan et al. 2017): example-weighted average of client deltas, with a server learning rate."""

from collections.abc import Mapping
from typing import Literal

from torch import Tensor

from lightfed.core.messages import ClientRows, ClientUpdate
from lightfed.core.sums import DELTA, WEIGHT, Sums
from lightfed.errors import ConfigError
from lightfed.strategies.base import SumsStrategy


def fedavg_step(params: Tensor, weighted_delta_sum: Tensor, weight_sum: float, server_lr: float) -> Tensor:
    """x + server_lr * sum_i(w_i * delta_i) / sum_i(w_i)."""
    return params + server_lr * (weighted_delta_sum / weight_sum).to(params.dtype)


class FedAvg(SumsStrategy):
    """Clients' deltas averaged with weights proportional to their number of examples (or uniformly).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedAvg
      init_args: {server_lr: 1.0, weighting: examples}
    ```

    Examples:
        Two clients, of 30 and 10 examples:

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.strategies import FedAvg, ServerContext
        >>> strategy = FedAvg()
        >>> strategy.setup(ServerContext(torch.zeros(2), num_clients=2))
        >>> sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        >>> for client, (delta, examples) in enumerate([([1.0, 0.0], 30), ([0.0, 1.0], 10)]):
        ...     update = ClientUpdate(client, torch.tensor(delta), torch.zeros(0), examples, 1, 1.0, torch.tensor(0.0))
        ...     strategy.accumulate(sums, update)
        >>> strategy.aggregate(torch.zeros(2), sums, round=0)
        tensor([0.7500, 0.2500])
        >>> FedAvg(server_lr=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: strategy.server_lr must be > 0, got 0
    """

    def __init__(self, server_lr: float = 1.0, weighting: Literal["examples", "uniform"] = "examples") -> None:
        """
        Args:
            server_lr: Scale of the averaged delta applied to the global model (1.0 is plain FedAvg).
            weighting: Weight each client by its number of examples, or all clients equally.
        """
        if server_lr <= 0:
            raise ConfigError(f"strategy.server_lr must be > 0, got {server_lr}")
        self.server_lr = server_lr
        self.weighting = weighting

    def client_weight(self, update: ClientUpdate) -> float:
        return self._weight(update.num_examples)

    def _weight(self, num_examples: int) -> float:
        return float(num_examples) if self.weighting == "examples" else 1.0

    def sum_sizes(self) -> dict[str, int]:
        return {DELTA: self.num_params, WEIGHT: 1}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        weight = self.client_weight(update)
        sums.add(DELTA, update.delta, weight=weight)
        sums.add(WEIGHT, weight)

    @property
    def takes_rows(self) -> bool:
        """Also not where a subclass weighs a client otherwise (``client_weight``)."""
        return super().takes_rows and type(self).client_weight is FedAvg.client_weight

    def accumulate_rows(self, sums: Sums, rows: ClientRows) -> None:
        weights = [self._weight(examples) for examples in rows.num_examples]
        sums.add_rows(DELTA, rows.deltas, weights)
        sums.add(WEIGHT, sum(weights))

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        return fedavg_step(params, sums[DELTA], float(sums[WEIGHT]), self.server_lr)
