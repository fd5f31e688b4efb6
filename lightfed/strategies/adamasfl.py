"""AdaMasFL (Yan et al., ICML 2025, Algorithms 3-4): MasFL with normalised local steps and step sizes set by
S, K and T alone (Theorem 2): tuning-free."""

from collections.abc import Mapping, Sequence
from dataclasses import replace

from torch import Tensor

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies.async_base import AsyncSetting
from lightfed.strategies.base import NOTHING
from lightfed.strategies.masfl import MasFL


class AdaMasFL(MasFL):
    """Clients take K steps of length exactly eta along MasFL's direction g_k / ||g_k|| and upload, besides c_i+,
    D_i = (x_start - x_K) / (eta K) (||D_i|| <= 1). Server: x <- x - gamma mean(D_i), so ||x+ - x|| <= gamma;
    g and c are updated as in MasFL and only shape the clients' directions.

    gamma = (S K)^(1/4) / T^(3/4), eta = 1 / (K sqrt(T)), beta = min(1, sqrt(S K / T)), each times a multiplier
    (1 by default: the theory's values, no tuning).

    In a config, with an ``asynchronous:`` section and a fixed ``trainer.local_steps``:

    ```yaml
    strategy:
      class_path: lightfed.strategies.AdaMasFL
      init_args: {gamma_mult: 1.0, eta_mult: 1.0}
    ```

    Examples:
        The step sizes for S = 5 updates a buffer, K = 10 local steps and T = 100 aggregations:

        >>> from lightfed.strategies import AdaMasFL, AsyncSetting
        >>> strategy = AdaMasFL()
        >>> strategy.configure_async(AsyncSetting(buffer_size=5, local_steps=10, rounds=100))
        >>> round(strategy.server_lr, 4), strategy.local_lr, round(strategy.beta, 4)  # gamma, eta, beta
        (0.0841, 0.01, 0.7071)
    """

    normalise = True

    def __init__(self, gamma_mult: float = 1.0, eta_mult: float = 1.0, beta: float | None = None) -> None:
        """
        Args:
            gamma_mult: Multiplier of the theory's global step size gamma.
            eta_mult: Multiplier of the theory's local step size eta.
            beta: Momentum weight of new information in (0, 1]; null: min(1, sqrt(S K / T)).

        Raises:
            ConfigError: ``gamma_mult`` or ``eta_mult`` is not positive, or ``beta`` is outside (0, 1].
        """
        if gamma_mult <= 0 or eta_mult <= 0:
            raise ConfigError(f"strategy.gamma_mult and strategy.eta_mult must be > 0, got {gamma_mult}, {eta_mult}")
        super().__init__(server_lr=gamma_mult, beta=beta)  # server_lr is set from S, K, T in configure_async
        self.gamma_mult, self.eta_mult = gamma_mult, eta_mult

    def configure_async(self, setting: AsyncSetting) -> None:
        """Sets gamma, eta and beta from S, K and T.

        Raises:
            ConfigError: the jobs' number of local steps K varies.
        """
        if setting.local_steps is None:
            raise ConfigError("AdaMasFL's step sizes need a fixed number of local steps K: set trainer.local_steps")
        super().configure_async(setting)
        s, k, t = setting.buffer_size, setting.local_steps, setting.rounds
        self.server_lr = self.gamma_mult * (s * k) ** 0.25 / t**0.75
        self.local_lr = self.eta_mult / (k * t**0.5)

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        return replace(super().configure_client(plan, received), lr=self.local_lr)

    def sum_sizes(self) -> dict[str, int]:
        return {**super().sum_sizes(), "displacement": self.num_params}

    def accumulate(self, sums: Sums, update: ClientUpdate, staleness: int) -> None:
        super().accumulate(sums, update, staleness)
        sums.add("displacement", update.delta, weight=-1 / update.local_time)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int, staleness: Sequence[int]) -> Tensor:
        self._update_state(sums)
        return params - self.server_lr * (sums["displacement"] / sums["count"]).to(params.dtype)

    def metrics(self) -> dict[str, float]:
        return {**super().metrics(), "gamma": self.server_lr, "eta": self.local_lr}
