"""The server side of a buffered asynchronous algorithm."""

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torch import Tensor

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.sums import Sums
from lightfed.strategies.base import Strategy


@dataclass(frozen=True)
class AsyncSetting:
    """The constants of an asynchronous run that step sizes may be computed from.

    Examples:
        >>> from lightfed.strategies import AsyncSetting
        >>> setting = AsyncSetting(buffer_size=5, local_steps=10, rounds=100)
        >>> (setting.buffer_size * setting.local_steps / setting.rounds) ** 0.5  # MasFL's default beta
        0.7071067811865476
    """

    buffer_size: int  # S: client updates per aggregation
    local_steps: int | None  # K: local steps of every job, None when they vary
    rounds: int  # T: aggregations in the run


class AsyncStrategy(Strategy, ABC):
    """A strategy for asynchronous rounds (a config's ``asynchronous:`` section): a client starts from a model version
    and the ``package`` published with it (its ``configure_client``'s ``received``), and its update may be aggregated
    several versions later (its staleness). Updates are added into named sums (``sum_sizes``) as on the sums path,
    with their staleness.

    A round is one aggregation of S updates. With ``warms_up``, every client does one job (``configure_warm_up``)
    from the initial model before the first aggregation (MasFL's initial control variates).

    In a config, next to the ``asynchronous:`` section:

    ```yaml
    asynchronous:
      concurrency: 10
    strategy:
      class_path: lightfed.strategies.FedBuff
      init_args: {server_lr: 2.0}
    ```

    Examples:
        The newest update counts fully, a stale one half:

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.strategies import AsyncStrategy, ServerContext
        >>> class HalveStale(AsyncStrategy):
        ...     def sum_sizes(self):
        ...         return {"delta": self.num_params}
        ...     def accumulate(self, sums, update, staleness):
        ...         sums.add("delta", update.delta, weight=0.5 if staleness else 1.0)
        ...     def aggregate(self, params, sums, round, staleness):
        ...         return params + sums["delta"].to(params.dtype)
        >>> strategy = HalveStale()
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=2))
        >>> sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        >>> for client, staleness in [(0, 0), (1, 3)]:
        ...     update = ClientUpdate(client, torch.ones(1), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0))
        ...     strategy.accumulate(sums, update, staleness)
        >>> strategy.aggregate(torch.zeros(1), sums, round=0, staleness=[0, 3])
        tensor([1.5000])
    """

    warms_up = False

    def configure_async(self, setting: AsyncSetting) -> None:
        """Called by the asynchronous trainer before ``setup``."""
        self.setting = setting

    def package(self) -> dict[str, Tensor]:
        """Vectors published with the current model for the clients that start from it. Default: none."""
        return {}

    @abstractmethod
    def sum_sizes(self) -> dict[str, int]:
        """Names and lengths of the sums that ``accumulate`` adds into."""

    @abstractmethod
    def accumulate(self, sums: Sums, update: ClientUpdate, staleness: int) -> None:
        """Adds one update, trained from the model of ``staleness`` rounds ago, into ``sums``."""

    @abstractmethod
    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int, staleness: Sequence[int]) -> Tensor:
        """The next model from the sums over a round's updates, whose stalenesses are ``staleness``."""

    def configure_warm_up(self, plan: ClientPlan) -> ClientPlan:
        """A client's warm-up job from the initial model (with ``warms_up``)."""
        return plan

    def accumulate_warm_up(self, sums: Sums, update: ClientUpdate) -> None:
        """Adds one warm-up job into ``sums``."""

    def finish_warm_up(self, sums: Mapping[str, Tensor]) -> None:
        """Initialises the server state from the warm-up sums over all clients."""
