"""Strategies that hold an inner strategy and change part of what it does (clipping, noise, attacks, masks)."""

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from lightfed.core.client_states import ClientStates, ProcessStore
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies.base import NOTHING, ServerContext, Strategy, SumsStrategy


class StrategyWrapper(Strategy):
    """Holds ``inner`` and delegates to it everything a subclass does not change; its requirements, state and
    stores are the inner strategy's (a wrapper with its own adds to them)."""

    def __init__(self, strategy: Strategy) -> None:
        self.inner = strategy

    @property
    def requirements(self) -> Requirements:  # type: ignore[override]
        return self.inner.requirements

    @property
    def client_states(self) -> ClientStates:  # type: ignore[override]
        return self.inner.client_states

    def setup(self, context: ServerContext) -> None:
        self.inner.setup(context)
        self.num_params, self.num_clients = context.num_params, context.num_clients

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        return self.inner.configure_client(plan, received)

    def evaluated(self, params: Tensor) -> Tensor:
        return self.inner.evaluated(params)

    def metrics(self) -> dict[str, float]:
        return self.inner.metrics()

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state["inner"])

    def stores(self) -> dict[str, ProcessStore]:
        return self.inner.stores()


class SumsStrategyWrapper(StrategyWrapper, SumsStrategy):
    """A wrapper on the sums path: ``inner`` must be a ``SumsStrategy`` (refused in one line otherwise)."""

    inner: SumsStrategy

    def __init__(self, strategy: Strategy) -> None:
        if not isinstance(strategy, SumsStrategy):
            raise ConfigError(
                f"{type(self).__name__} wraps a strategy of the sums path (FedAvg, FedAdam, Scaffold, ...), not "
                f"{type(strategy).__name__}"
            )
        super().__init__(strategy)

    def sum_sizes(self) -> dict[str, int]:
        return self.inner.sum_sizes()

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        self.inner.accumulate(sums, update)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        return self.inner.aggregate(params, sums, round)
