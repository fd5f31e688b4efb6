"""FedBuff (Nguyen et al. 2022): buffered asynchronous aggregation of stale client deltas."""

import math
from collections.abc import Mapping, Sequence

from torch import Tensor

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies.async_base import AsyncStrategy


class FedBuff(AsyncStrategy):
    """x <- x + server_lr * (1/S) sum_i w_i delta_i over the S buffered deltas, w_i = 1 or 1/sqrt(1 + staleness_i).

    In a config, with an ``asynchronous:`` section:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedBuff
      init_args: {server_lr: 2.0, staleness_weighting: true}
    ```

    Examples:
        A fresh delta and one three versions old, which counts 1 / sqrt(4):

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.strategies import FedBuff, ServerContext
        >>> strategy = FedBuff(staleness_weighting=True)
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=2))
        >>> sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        >>> for client, staleness in [(0, 0), (1, 3)]:
        ...     update = ClientUpdate(client, torch.ones(1), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0))
        ...     strategy.accumulate(sums, update, staleness)
        >>> strategy.aggregate(torch.zeros(1), sums, round=0, staleness=[0, 3])
        tensor([0.7500])
    """

    def __init__(self, server_lr: float = 1.0, staleness_weighting: bool = False) -> None:
        """
        Args:
            server_lr: Global step size gamma.
            staleness_weighting: Scale each delta by 1/sqrt(1 + staleness), as the paper's optional variant.
        """
        if server_lr <= 0:
            raise ConfigError(f"strategy.server_lr must be > 0, got {server_lr}")
        self.server_lr = server_lr
        self.staleness_weighting = staleness_weighting

    def sum_sizes(self) -> dict[str, int]:
        return {"delta": self.num_params, "count": 1}

    def accumulate(self, sums: Sums, update: ClientUpdate, staleness: int) -> None:
        weight = 1 / math.sqrt(1 + staleness) if self.staleness_weighting else 1.0
        sums.add("delta", update.delta, weight=weight)
        sums.add("count", 1)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int, staleness: Sequence[int]) -> Tensor:
        return params + self.server_lr * (sums["delta"] / sums["count"]).to(params.dtype)
