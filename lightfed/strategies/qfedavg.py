"""q-FedAvg (Li, Sanjabi, Beirami, Smith, ICLR 2020, "Fair Resource Allocation in Federated Learning"), the
q-FFL objective's federated solver."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

import torch
from torch import Tensor

from lightfed.core.messages import ClientPlan, ClientRows, ClientUpdate
from lightfed.core.requirements import Requirements
from lightfed.core.sums import DELTA, WEIGHT, Sums
from lightfed.errors import ConfigError
from lightfed.local.loss_at_global import LOSS_AT_GLOBAL, SENDS_LOSS, LossAtGlobal
from lightfed.strategies.base import NOTHING
from lightfed.strategies.fedavg import FedAvg

LOSS_FLOOR = 1e-10  # F_k is taken as max(F_k, LOSS_FLOOR): F_k^(q-1) stays finite for a client of zero loss


def qfedavg_step(
    params: Tensor, deltas: Sequence[Tensor], losses: Sequence[float], q: float, lipschitz: float
) -> Tensor:
    """The paper's Algorithm 2 as printed, with delta_k = w_bar_k - w^t the client's update:
    Delta_k = F_k^q L (w^t - w_bar_k), h_k = q F_k^(q-1) ||L (w^t - w_bar_k)||^2 + L F_k^q,
    w^(t+1) = w^t - sum_k Delta_k / sum_k h_k. A new tensor (the reference the strategy's sums are tested against)."""
    big_deltas = [loss**q * lipschitz * -delta for delta, loss in zip(deltas, losses, strict=True)]
    hs = [
        q * loss ** (q - 1) * float((lipschitz * delta).square().sum()) + lipschitz * loss**q
        for delta, loss in zip(deltas, losses, strict=True)
    ]
    return params - torch.stack(big_deltas).sum(0) / sum(hs)


def qffl_terms(loss: float, q: float, lipschitz: float, delta_sq_norm: float) -> tuple[float, float]:
    """One client's (Delta_k, h_k) of ``qfedavg_step`` divided by L: Delta_k / L = -F^q delta_k, returned as the weight
    F^q of delta_k, and h_k / L = F^q + q F^(q-1) L ||delta_k||^2 (F floored at ``LOSS_FLOOR``). With q = 0 they are
    exactly (1.0, 1.0)."""
    if q == 0:
        return 1.0, 1.0
    loss = max(loss, LOSS_FLOOR)
    return loss**q, loss**q + q * loss ** (q - 1) * lipschitz * delta_sq_norm


class QFedAvg(FedAvg):
    """q-FedAvg: each client sends its loss F_k(w^t) on its training data at the global weights it received
    (``LossAtGlobal``) beside its update delta_k = w_bar_k - w^t (its local SGD steps from w^t); the server takes

        Delta_k = F_k^q(w^t) L (w^t - w_bar_k),   h_k = q F_k^(q-1)(w^t) ||L (w^t - w_bar_k)||^2 + L F_k^q(w^t),
        w^(t+1) = w^t - server_lr * sum_k p_k Delta_k / sum_k p_k h_k,

    which minimises f_q(w) = sum_k p_k F_k^(q+1)(w) / (q + 1): q > 0 weighs the clients of high loss up, q = 0 is
    FedAvg's objective. L (the Lipschitz constant of the gradients) is 1 / eta, eta the client's mean local step size,
    as the paper sets it, unless ``lipschitz`` is given.

    Weighting: the paper samples clients with probability p_k = n_k / n and averages the sampled ones uniformly;
    lightfed samples clients uniformly, so ``weighting="examples"`` (p_k proportional to n_k, FedAvg's default) is the
    same objective, estimated with weights instead of sampling, and ``weighting="uniform"`` (p_k = 1, the paper's
    server step as printed) its uniform-p_k form.

    q = 0 is FedAvg with the same ``server_lr`` and ``weighting`` bit for bit: dividing Delta_k and h_k by L leaves
    each client's delta weighted by p_k F_k^0 = p_k and the denominator sum_k p_k (F_k^0 + 0) = sum_k p_k, exactly
    FedAvg's sums; clients are not asked for their loss (F^0 = 1) and train as under FedAvg, vectorized where it is.

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.QFedAvg
      init_args: {q: 1.0, lipschitz: 1.0}
    ```

    Examples:
        The client of loss 4 moves the model further than FedAvg's 0.5 would:

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.strategies import QFedAvg, ServerContext
        >>> strategy = QFedAvg(q=1.0, lipschitz=1.0)
        >>> strategy.setup(ServerContext(torch.zeros(2), num_clients=2))
        >>> sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        >>> for client, (delta, loss) in enumerate([([1.0, 0.0], 4.0), ([0.0, 1.0], 1.0)]):
        ...     report = {"loss_at_global": loss}  # what LossAtGlobal sends
        ...     update = ClientUpdate(client, torch.tensor(delta), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0), report)
        ...     strategy.accumulate(sums, update)
        >>> strategy.aggregate(torch.zeros(2), sums, round=0)
        tensor([0.5714, 0.1429])
    """

    def __init__(
        self,
        q: float = 1.0,
        lipschitz: float | None = None,
        server_lr: float = 1.0,
        weighting: Literal["examples", "uniform"] = "examples",
    ) -> None:
        """
        Args:
            q: Fairness exponent (0: FedAvg; the paper tunes it per dataset).
            lipschitz: L; null: 1 / (each client's mean local step size), the paper's 1 / eta.
            server_lr: Scale of the step sum Delta / sum h (1.0: the paper's).
            weighting: p_k: the client's number of examples, or 1 for every client (the paper's printed step).

        Raises:
            ConfigError: q is negative or not finite, or lipschitz or server_lr is not positive.
        """
        if not math.isfinite(q) or q < 0:
            raise ConfigError(f"strategy.q must be a finite number >= 0, got {q}")
        if lipschitz is not None and not lipschitz > 0:
            raise ConfigError(f"strategy.lipschitz must be > 0 (or null: 1 / the local step size), got {lipschitz}")
        super().__init__(server_lr=server_lr, weighting=weighting)
        self.q, self.lipschitz = q, lipschitz
        self.requirements = SENDS_LOSS if q > 0 else Requirements()

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        if self.q == 0:
            return plan
        return replace(plan, rule=LossAtGlobal(plan.client_id, plan.seed, plan.rule))

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        if self.q == 0:
            super().accumulate(sums, update)
            return
        lipschitz = self._lipschitz(update)
        delta_sq_norm = float(update.delta.double().square().sum())
        weight, h = qffl_terms(float(update.report[LOSS_AT_GLOBAL]), self.q, lipschitz, delta_sq_norm)
        p_k = self._weight(update.num_examples)
        sums.add(DELTA, update.delta, weight=p_k * weight)
        sums.add(WEIGHT, p_k * h)

    def _lipschitz(self, update: ClientUpdate) -> float:
        """L: the given one, else 1 / the client's mean step size (its steps over the sum of their sizes)."""
        if self.lipschitz is not None:
            return self.lipschitz
        if not update.local_time > 0:
            raise ConfigError(
                f"strategy.lipschitz null is 1 / a client's mean step size, but client {update.client_id} took no "
                "step of positive size: set strategy.lipschitz"
            )
        return update.num_steps / update.local_time

    def accumulate_rows(self, sums: Sums, rows: ClientRows) -> None:
        if self.q == 0:
            super().accumulate_rows(sums, rows)
            return
        for update in rows.updates():
            self.accumulate(sums, update)
