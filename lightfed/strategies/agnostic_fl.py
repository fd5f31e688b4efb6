"""Agnostic federated learning (Mohri, Sivek, Suresh, ICML 2019): the model that minimises the loss of the worst
mixture of the clients, by stochastic gradient descent on the model and projected gradient ascent on the mixture."""

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.sums import DELTA, Sums
from lightfed.errors import ConfigError
from lightfed.local.loss_at_global import LOSS_AT_GLOBAL, SENDS_LOSS, LossAtGlobal
from lightfed.strategies.base import NOTHING, ServerContext, SumsStrategy
from lightfed.strategies.simplex import project_to_simplex

LOSSES, COUNT = "losses", "count"


def mixture_step(lam: Tensor, loss_sums: Tensor, num_sampled: float, gamma: float) -> Tensor:
    """lambda <- Proj_simplex(lambda + gamma g), g = (N / m) loss_sums: ``loss_sums`` holds L_k(w) at the m sampled
    clients' coordinates and 0 at the others', so g is an unbiased estimate of the loss vector (L_1(w) .. L_N(w)),
    the gradient in lambda of L_lambda(w) = sum_k lambda_k L_k(w). A new tensor."""
    return project_to_simplex(lam + gamma * (len(lam) / num_sampled) * loss_sums.to(lam))


def model_step(params: Tensor, weighted_delta_sum: Tensor, num_sampled: float, num_clients: int, lr: float) -> Tensor:
    """w <- w + lr (N / m) sum_{k sampled} lambda_k delta_k: an unbiased estimate of sum_k lambda_k delta_k, the step
    along the gradient of L_lambda(w) that the clients' local steps take. A new tensor."""
    return params + lr * (weighted_delta_sum * (num_clients / num_sampled)).to(params.dtype)


class AgnosticFL(SumsStrategy):
    """Stochastic-AFL on clients: min_w max_{lambda in simplex} L_lambda(w) = sum_k lambda_k L_k(w). Each sampled
    client k trains from w^t (its delta_k) and sends L_k(w^t), its training loss at the received weights
    (``LossAtGlobal``); then, both steps from (w^t, lambda^t),

        w^(t+1) = w^t + server_lr (N / m) sum_{k in S} lambda_k^t delta_k
        lambda^(t+1) = Proj_simplex(lambda^t + lambda_lr (N / m) sum_{k in S} L_k(w^t) e_k)

    with S the m clients whose updates arrived and N the population; lambda starts uniform (1 / N each).

    Partial participation: a client not sampled this round adds 0 to both sums, and the sampled ones count N / m
    times, which makes both steps unbiased estimates of the full-participation ones (the paper's stochastic
    gradients); with every client each round, N / m = 1 and these are the deterministic steps. An unsampled client's
    weight still moves through the projection (it is shifted by the same theta as the others, and clipped at 0).
    The paper's averaged iterates and restricted mixture sets Lambda are not implemented (Lambda is the simplex).

    In a config:

    ```yaml
    strategy:
      class_path: lightfed.strategies.AgnosticFL
      init_args: {lambda_lr: 0.01}
    ```

    Examples:
        The mixture weight of the client of higher loss grows:

        >>> import torch
        >>> from lightfed import ClientUpdate, Sums
        >>> from lightfed.strategies import AgnosticFL, ServerContext
        >>> strategy = AgnosticFL(lambda_lr=0.1)
        >>> strategy.setup(ServerContext(torch.zeros(1), num_clients=2))
        >>> sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
        >>> for client, loss in enumerate([3.0, 1.0]):
        ...     report = {"loss_at_global": loss}  # what LossAtGlobal sends
        ...     update = ClientUpdate(client, torch.ones(1), torch.zeros(0), 10, 1, 1.0, torch.tensor(0.0), report)
        ...     strategy.accumulate(sums, update)
        >>> strategy.aggregate(torch.zeros(1), sums, round=0)
        tensor([1.])
        >>> strategy.lam
        tensor([0.6000, 0.4000], dtype=torch.float64)
    """

    requirements = SENDS_LOSS

    def __init__(self, lambda_lr: float = 0.01, server_lr: float = 1.0) -> None:
        """
        Args:
            lambda_lr: gamma_lambda, the step size of the mixture weights' ascent.
            server_lr: Scale of the model step (1.0: the lambda-weighted sum of the deltas).

        Raises:
            ConfigError: lambda_lr is negative or server_lr not positive.
        """
        if not lambda_lr >= 0:
            raise ConfigError(f"strategy.lambda_lr must be >= 0, got {lambda_lr}")
        if not server_lr > 0:
            raise ConfigError(f"strategy.server_lr must be > 0, got {server_lr}")
        self.lambda_lr, self.server_lr = lambda_lr, server_lr

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        self.lam = torch.full((context.num_clients,), 1.0 / context.num_clients, dtype=torch.float64)

    def configure_client(self, plan: ClientPlan, received: Mapping[str, Tensor] = NOTHING) -> ClientPlan:
        return replace(plan, rule=LossAtGlobal(plan.client_id, plan.seed, plan.rule))

    def sum_sizes(self) -> dict[str, int]:
        return {DELTA: self.num_params, LOSSES: self.num_clients, COUNT: 1}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        sums.add(DELTA, update.delta, weight=float(self.lam[update.client_id]))
        loss = torch.zeros(self.num_clients, dtype=torch.float64, device=update.delta.device)
        loss[update.client_id] = float(update.report[LOSS_AT_GLOBAL])
        sums.add(LOSSES, loss)
        sums.add(COUNT, 1.0)

    def aggregate(self, params: Tensor, sums: Mapping[str, Tensor], round: int) -> Tensor:
        sampled = float(sums[COUNT])
        new = model_step(params, sums[DELTA], sampled, self.num_clients, self.server_lr)
        self.lam = mixture_step(self.lam, sums[LOSSES].cpu(), sampled, self.lambda_lr)
        return new

    def metrics(self) -> dict[str, float]:
        return {"lambda_max": float(self.lam.max()), "lambda_min": float(self.lam.min())}

    def state_dict(self) -> dict[str, Any]:
        return {"lambda": self.lam}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lam = state["lambda"].to(torch.float64).cpu()
