"""The server side of a buffered asynchronous algorithm."""

from collections.abc import Mapping
from dataclasses import dataclass

from torch import Tensor

from lightfed.errors import ConfigError
from lightfed.strategies.base import Strategy
from lightfed.core.sums import Sums
from lightfed.core.messages import ClientPlan, ClientUpdate


@dataclass(frozen=True)
class AsyncSetting:
    """The constants of an asynchronous run that step sizes may be computed from."""

    buffer_size: int  # S: client updates per aggregation
    local_steps: int | None  # K: local steps of every job, None when they vary
    rounds: int  # T: aggregations in the run


class AsyncStrategy(Strategy):
    """A strategy for ``AsyncFederatedTrainer``: a client starts from a model version and the ``package`` published
    with it, and its update may be aggregated several versions later (its staleness).

    A round is one aggregation of S updates. With ``warms_up``, every client does one job (``configure_warm_up``)
    from the initial model before the first aggregation (MasFL's initial control variates).
    """

    setting: AsyncSetting | None = None
    warms_up = False

    def configure_async(self, setting: AsyncSetting) -> None:
        """Called by the asynchronous trainer before ``setup``."""
        self.setting = setting

    def check(self, world_size: int) -> None:
        if self.setting is None:
            raise ConfigError(
                f"{type(self).__name__} is asynchronous: add an `asynchronous:` section (e.g. concurrency: 20) to the config"
            )
        super().check(world_size)

    def package(self) -> dict[str, Tensor]:
        """Vectors published with the current model for the clients that start from it. Default: none."""
        return {}

    def configure_warm_up(self, plan: ClientPlan) -> ClientPlan:
        """A client's warm-up job from the initial model (with ``warms_up``)."""
        return plan

    def accumulate_warm_up(self, sums: Sums, update: ClientUpdate) -> None:
        """Adds one warm-up job into ``sums``."""

    def finish_warm_up(self, sums: Mapping[str, Tensor]) -> None:
        """Initialises the server state from the warm-up sums over all clients."""
