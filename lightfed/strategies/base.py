"""The server side of a federated algorithm: what every strategy has, and the sums path."""

from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from torch import Tensor

from lightfed.core.client_states import ProcessStore
from lightfed.core.messages import ClientPlan, ClientRows, ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.server_context import ServerContext
from lightfed.core.sums import Sums

NOTHING: Mapping[str, Tensor] = MappingProxyType({})  # what a client of the sums path receives beside the model


class Strategy:
    """What every server algorithm has: set-up, a client's plan, metrics, state to resume, its per-client store and
    its ``requirements``. Strategies see only flat fp32 tensors.

    Its server path is its protocol: ``SumsStrategy`` (streaming sums, one all-reduce), ``ShardedStrategy`` (every
    active client's whole update, sharded by coordinate) or ``AsyncStrategy`` (buffered stale updates).

    In a config, the ``strategy:`` key names one:

    ```yaml
    strategy:
      class_path: lightfed.strategies.FedAvg
      init_args: {server_lr: 1.0}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.strategies import ServerContext, Strategy
        >>> strategy = Strategy()
        >>> strategy.setup(ServerContext(torch.zeros(3), num_clients=10))
        >>> strategy.num_params, strategy.num_clients
        (3, 10)
        >>> strategy.evaluated(torch.ones(3))
        tensor([1., 1., 1.])
    """

    requirements = Requirements()

    def setup(self, context: ServerContext) -> None:
        """Called once with the run's context before the first round (and before a resume)."""
        self.num_params = context.num_params
        self.num_clients = context.num_clients
        self.client_states = context.client_store()

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        """A client's plan for this round (local work, learning rate, local rule); ``received``: the vectors it gets
        beside the global model (a sharded strategy's ``client_vectors``, an asynchronous strategy's ``package``).
        Default: unchanged."""
        return plan

    def evaluated(self, params: Tensor) -> Tensor:
        """The weights the run evaluates (validation, test, best round) when the global model is ``params``.
        Default: ``params``; FedExP can evaluate the mean of its last two iterates and continue from the last."""
        return params

    def metrics(self) -> dict[str, float]:
        """Scalars to log after each round."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume that is the same on every process (saved once, in ``last.ckpt``)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores what ``state_dict`` returned."""

    def stores(self) -> dict[str, ProcessStore]:
        """What only this process holds, by name: the run saves each in this process's own checkpoint file."""
        return {"clients": self.client_states}


class SumsStrategy(Strategy, ABC):
    """The sums path: client contributions are added into named sums (``sum_sizes``) on whichever process trained
    the client; one all-reduce combines them before ``aggregate``.

    A strategy that remembers something per client declares ``Requirements(client_state=True)`` and uses
    ``self.client_states``: each client then always trains on the same process, where its state lives.

    Examples:
        A uniform mean of the deltas, on two clients:

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.strategies import ServerContext, SumsStrategy
        >>> class UniformMean(SumsStrategy):
        ...     def sum_sizes(self):
        ...         return {"delta": self.num_params, "count": 1}
        ...     def accumulate(self, sums, update):
        ...         sums.add("delta", update.delta)
        ...         sums.add("count", 1)
        ...     def aggregate(self, params, sums, round):  # the sums are float64
        ...         return params + (sums["delta"] / sums["count"]).to(params.dtype)
        >>> strategy = UniformMean()
        >>> strategy.setup(ServerContext(torch.zeros(2), num_clients=2))
        >>> sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        >>> for client, delta in enumerate([[2.0, 0.0], [0.0, 4.0]]):
        ...     update = ClientUpdate(client, torch.tensor(delta), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0))
        ...     strategy.accumulate(sums, update)
        >>> strategy.aggregate(torch.zeros(2), sums, round=0)
        tensor([1., 2.])
    """

    @abstractmethod
    def sum_sizes(self) -> dict[str, int]:
        """Names and lengths of the sums that ``accumulate`` adds into."""

    @abstractmethod
    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        """Adds one client's contribution into ``sums``."""

    def accumulate_rows(self, sums: Sums, rows: ClientRows) -> None:
        """Adds the contributions of clients trained together (``rows``) into ``sums``, as ``accumulate`` would add
        them one by one; called only where ``takes_rows``."""
        raise NotImplementedError(f"{type(self).__name__} adds one update at a time")

    @property
    def takes_rows(self) -> bool:
        """Whether the class whose ``accumulate`` this strategy runs gives ``accumulate_rows`` too (a subclass that
        changes what one client adds does not inherit another's rows)."""
        owner = next(cls for cls in type(self).__mro__ if "accumulate" in vars(cls))
        return "accumulate_rows" in vars(owner)

    @abstractmethod
    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        """The next global parameters from the current ones and the sums over all clients of the round."""
