"""CA²FL (Wang et al., ICLR 2024): asynchronous aggregation calibrated by each client's cached latest update."""

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from lightfed.core.messages import ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies.async_base import AsyncStrategy
from lightfed.strategies.base import ServerContext


def ca2fl_step(
    params: Tensor, h: Tensor, dh: Tensor, count: Tensor | float, num_clients: int, server_lr: float
) -> tuple[Tensor, Tensor]:
    """One CA²FL aggregation, from dh = sum over the S = ``count`` buffered updates of (delta_i - h_i):
    x+ = x + server_lr (h + dh / S) and h+ = h + dh / N (the mean of the N clients' cached updates once each h_i is
    replaced by delta_i). Returns (x+, h+), new tensors."""
    return params + server_lr * (h + dh / count), h.add(dh / num_clients)


class CA2FL(AsyncStrategy):
    """v = h + (1/S) sum_i (delta_i - h_i);  x <- x + server_lr * v;  then h_i <- delta_i and h = mean over all N
    clients of h_i (caches start at 0).

    Memory: one cached delta h_i (d floats) per client that has trained, on the CPU.

    In a config, with an ``asynchronous:`` section:

    ```yaml
    strategy:
      class_path: lightfed.strategies.CA2FL
      init_args: {server_lr: 2.0}
    ```

    Examples:
        One of two clients arrives; its delta is cached and counts for half of the mean h:

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.strategies import CA2FL, ServerContext
        >>> strategy = CA2FL()
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=2))
        >>> sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        >>> update = ClientUpdate(0, torch.tensor([2.0]), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0))
        >>> strategy.accumulate(sums, update, staleness=0)
        >>> strategy.aggregate(torch.zeros(1), sums, round=0, staleness=[0])
        tensor([2.])
        >>> strategy.h, strategy.client_states.get(0, "h")
        (tensor([1.]), tensor([2.]))
    """

    requirements = Requirements(client_state=True)

    def __init__(self, server_lr: float = 1.0) -> None:
        """
        Args:
            server_lr: Global step size gamma.

        Raises:
            ConfigError: ``server_lr`` is not positive.
        """
        if server_lr <= 0:
            raise ConfigError(f"strategy.server_lr must be > 0, got {server_lr}")
        self.server_lr = server_lr

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        self.h = torch.zeros_like(context.params)

    def sum_sizes(self) -> dict[str, int]:
        return {"dh": self.num_params, "count": 1}

    def accumulate(self, sums: Sums, update: ClientUpdate, staleness: int) -> None:
        h_i = self.client_states.get(update.client_id, "h")
        dh = update.delta if h_i is None else update.delta - h_i.to(update.delta.device)
        self.client_states.set(update.client_id, "h", update.delta)
        sums.add("dh", dh)
        sums.add("count", 1)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int, staleness: Sequence[int]) -> Tensor:
        dh, count = sums["dh"].to(params.dtype), sums["count"].to(params.dtype)
        params, self.h = ca2fl_step(params, self.h, dh, count, self.num_clients, self.server_lr)
        return params

    def metrics(self) -> dict[str, float]:
        return {"h_norm": self.h.norm().item()}

    def state_dict(self) -> dict[str, Any]:
        return {"h": self.h}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.h.copy_(state["h"])
