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
    """The constants of an asynchronous run that step sizes may be computed from."""

    buffer_size: int  # S: client updates per aggregation
    local_steps: int | None  # K: local steps of every job, None when they vary
    rounds: int  # T: aggregations in the run


class AsyncStrategy(Strategy, ABC):
    """A strategy for asynchronous rounds (``trainer.asynchrony``): a client starts from a model version and the ``package`` published
    with it (its ``configure_client``'s ``received``), and its update may be aggregated several versions later (its
    staleness). Updates are added into named sums (``sum_sizes``) as on the sums path, with their staleness.

    A round is one aggregation of S updates. With ``warms_up``, every client does one job (``configure_warm_up``)
    from the initial model before the first aggregation (MasFL's initial control variates).
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
