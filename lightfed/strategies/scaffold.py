"""SCAFFOLD (Karimireddy et al. 2020), option II control variates."""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.local.correction import GradientCorrection
from lightfed.strategies.base import NOTHING, ServerContext
from lightfed.strategies.fedavg import FedAvg


def client_control_variate(c_i: Tensor, c: Tensor, delta: Tensor, local_time: float) -> Tensor:
    """Option II's new control variate of a client: c_i+ = c_i - c + (x - y_i) / T_i = c_i - c - delta_i / T_i, with
    delta_i = y_i - x its update and T_i the sum of its step sizes. A new tensor."""
    return c_i - c - delta / local_time


def server_control_variate(c: Tensor, dc_sum: Tensor, num_clients: int) -> Tensor:
    """c+ = c + sum_i (c_i+ - c_i) / N over the N clients of the population, in c's dtype. A new tensor."""
    return c.add((dc_sum / num_clients).to(c.dtype))


class Scaffold(FedAvg):
    """Clients step along g + c - c_i; then c_i+ = c_i - c + (x - y_i) / T_i (T_i: sum of step sizes, K lr for SGD).
    Server: x <- x + eta_g mean(y_i - x), c <- c + sum(c_i+ - c_i) / N.

    Memory: one control variate c_i per client that has trained (N x d floats on the CPU over a run), or on disk
    with ``client_states: disk`` (``lightfed.core.disk_client_states``).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.Scaffold
      init_args: {server_lr: 1.0}
    ```

    Examples:
        One of two clients takes five steps of 0.1 and moves by 1: its control variate becomes -1 / 0.5.

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.strategies import Scaffold, ServerContext
        >>> strategy = Scaffold()
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=2))
        >>> sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        >>> strategy.accumulate(sums, ClientUpdate(0, torch.ones(1), torch.zeros(0), 10, 5, 0.5, torch.tensor(0.0)))
        >>> strategy.client_states.get(0, "c")
        tensor([-2.])
        >>> strategy.aggregate(torch.zeros(1), sums, round=0)
        tensor([1.])
        >>> strategy.c  # the mean over both clients
        tensor([-1.])
        >>> Scaffold(client_states="files")
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: strategy.client_states must be "memory" or "disk", got 'files'
    """

    requirements = Requirements(client_state=True, plain_sgd=True)  # its control variates are (x - y_i) / (K lr)

    def __init__(
        self, server_lr: float = 1.0, client_states: str = "memory", client_states_folder: str | None = None
    ) -> None:
        """
        Args:
            server_lr: Global step size eta_g.
            client_states: Where the control variates live: "memory" (each process holds its clients'; a checkpoint
                rewrites them all) or "disk" (files read for the clients of a round and written for those only; a
                checkpoint writes only the clients trained since the last one; for populations whose N x d floats do
                not fit in memory). The weights are the same either way. ``trainer.client_states`` sets it for every
                strategy; "disk" here puts SCAFFOLD's on disk whatever the trainer says.
            client_states_folder: With "disk", where each process keeps its files (null: a new temporary folder); on
                the file system of the run folder, a checkpoint links them instead of copying them.

        Raises:
            ConfigError: ``client_states`` is neither "memory" nor "disk", or ``server_lr`` is not positive.
        """
        if client_states not in ("memory", "disk"):
            raise ConfigError(f'strategy.client_states must be "memory" or "disk", got {client_states!r}')
        super().__init__(server_lr=server_lr, weighting="uniform")
        self.on_disk, self.client_states_folder = client_states == "disk", client_states_folder

    def setup(self, context: ServerContext) -> None:
        if self.on_disk:  # its own setting, whatever trainer.client_states says
            context = replace(context, client_states="disk", client_states_folder=self.client_states_folder)
        super().setup(context)
        self.c = torch.zeros_like(context.params)

    def _client_variate(self, client_id: int) -> Tensor:
        c_i = self.client_states.get(client_id, "c")
        return torch.zeros_like(self.c) if c_i is None else c_i.to(self.c.device)

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        return replace(plan, rule=GradientCorrection(self.c - self._client_variate(plan.client_id)))

    def sum_sizes(self) -> dict[str, int]:
        return {**super().sum_sizes(), "dc": self.num_params}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        super().accumulate(sums, update)
        c_i = self._client_variate(update.client_id)
        new_c_i = client_control_variate(c_i, self.c, update.delta, update.local_time)
        self.client_states.set(update.client_id, "c", new_c_i)
        sums.add("dc", new_c_i - c_i)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        self.c = server_control_variate(self.c, sums["dc"], self.num_clients)
        return super().aggregate(params, sums, round)

    def metrics(self) -> dict[str, float]:
        return {"c_norm": self.c.norm().item()}

    def state_dict(self) -> dict[str, Any]:
        return {"c": self.c}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.c.copy_(state["c"])
