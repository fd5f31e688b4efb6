"""Heterogeneous quadratic clients driven through a strategy's real client rules and server code, without Fabric.

Client i: F_i(x) = (x - b_i)' A_i (x - b_i) / 2 (its mean loss), |D_i| examples, batch size B = mean |D_i|; the
optimum of sum_i |D_i| F_i is known in closed form. One local step is one full-gradient step at the client's
current point, through the rule the strategy built (``adjust``, or the rule's own step when ``takes_step``).
"""

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch
from torch import Tensor, nn

from lightfed.core.seeding import sample_clients
from lightfed.strategies.base import Strategy
from lightfed.core.sums import Sums
from lightfed.core.messages import ClientPlan, ClientUpdate


@dataclass
class Quadratics:
    A: np.ndarray  # (n, d, d)
    b: np.ndarray  # (n, d)
    sizes: np.ndarray  # (n,)

    @property
    def optimum(self) -> np.ndarray:
        w = self.sizes[:, None, None] * self.A
        return np.linalg.solve(w.sum(0), np.einsum("nij,nj->i", w, self.b))

    def relative_error(self, x: Tensor) -> float:
        return float(np.linalg.norm(x.double().numpy() - self.optimum) / np.linalg.norm(self.optimum))


def dense_quadratics(seed: int = 0, d: int = 20, n: int = 20) -> Quadratics:
    """The FedECADO spec's toy problem (``make_problem`` of fedecado_toy_check.py)."""
    rng = np.random.default_rng(seed)
    A, b = [], []
    for _ in range(n):
        Q = rng.normal(size=(d, d))
        A.append(Q @ Q.T / d + 0.1 * np.eye(d))
        b.append(rng.normal(size=d) * 3)
    return Quadratics(np.array(A), np.array(b), rng.integers(50, 1000, size=n))


def diagonal_quadratics(seed: int = 0, d: int = 20, n: int = 16) -> Quadratics:
    """The Adaptive FedECADO spec's toy problem: h ~ U[0.1, 10], a ~ N(0, 3^2), |D_i| ~ U{10..500}."""
    rng = np.random.default_rng(seed)
    h = rng.uniform(0.1, 10.0, size=(n, d))
    a = rng.normal(0, 3, size=(n, d))
    return Quadratics(np.stack([np.diag(row) for row in h]), a, rng.integers(10, 500, size=n))


class QuadraticModule(nn.Module):
    """The live "model" of a client: one flat parameter and the client's quadratic as training_step."""

    def __init__(self, A: Tensor, b: Tensor, x: Tensor) -> None:
        super().__init__()
        self.A, self.b = A, b
        self.w = nn.Parameter(x.clone())

    def training_step(self, batch, batch_idx):
        r = self.w - self.b
        return r @ (self.A @ r) / 2


class QuadraticData:
    def __init__(self, sizes: np.ndarray) -> None:
        self.sizes = sizes
        self.batch_size = int(round(sizes.mean()))
        self.num_clients = len(sizes)

    def client_size(self, client_id: int) -> int:
        return int(self.sizes[client_id])

    def client_batches(self, client_id, generator, epochs=None, steps=None):
        return iter([None] * (steps or 1))


class QuadraticContext:
    """Stands in for ``LocalContext``: ``module``, ``data``, ``flat``, ``lr``, ``scales_gradients`` and
    ``recompute_gradient``."""

    def __init__(self, problem: Quadratics, client_id: int, params: Tensor, lr: float) -> None:
        self.A = torch.tensor(problem.A[client_id], dtype=params.dtype)
        self.b = torch.tensor(problem.b[client_id], dtype=params.dtype)
        self.module = QuadraticModule(self.A, self.b, params)
        self.data = QuadraticData(problem.sizes)
        self.lr = lr
        self.scales_gradients = False
        self.flat = SimpleNamespace(params=params.clone(), grads=torch.zeros_like(params))

    def recompute_gradient(self) -> Tensor:
        r = self.flat.params - self.b
        self.flat.grads.copy_(self.A @ r)
        return r @ (self.A @ r) / 2


def train_client(strategy: Strategy, problem: Quadratics, plan: ClientPlan, params: Tensor, lr: float) -> ClientUpdate:
    """``steps`` local steps of the client loop (lr: the optimizer's learning rate) through the plan's rule."""
    plan = strategy.configure_client(plan)
    context = QuadraticContext(problem, plan.client_id, params, lr)
    rule = plan.rule
    rule.start(params, context)
    local_time = 0.0
    for _ in range(plan.steps):
        context.recompute_gradient()
        rule.adjust(context.flat.grads, context.flat.params)
        if not getattr(rule, "takes_step", False):
            context.flat.params.sub_(context.flat.grads, alpha=context.lr)
        local_time += context.lr
    return ClientUpdate(
        client_id=plan.client_id,
        delta=context.flat.params - params,
        buffers=torch.zeros(0),
        num_examples=context.data.client_size(plan.client_id),
        num_steps=plan.steps,
        local_time=local_time,
        train_loss=torch.zeros(()),
        report=rule.report(),
    )


def run_rounds(
    strategy: Strategy,
    problem: Quadratics,
    rounds: int,
    per_round: int,
    steps: np.ndarray,
    lrs: np.ndarray,
    x0: Tensor,
    seed: int = 0,
    on_round=None,
) -> Tensor:
    """Synchronous rounds: sample, train each client through its rule, accumulate, aggregate; returns x_c.

    ``steps``: local steps per client (n,), or per round and client (rounds, n).
    """
    n = len(problem.sizes)
    strategy.setup(x0.clone(), n)
    sums = Sums(strategy.sum_sizes(), x0.device)
    params = x0.clone()
    for round in range(rounds):
        sums.zero_()
        for client_id in sample_clients(seed, round, n, per_round):
            plan = ClientPlan(client_id, round, seed=1000 * round + client_id, steps=int(steps[client_id] if steps.ndim == 1 else steps[round, client_id]))
            strategy.accumulate(sums, train_client(strategy, problem, plan, params, float(lrs[client_id])))
        params = strategy.aggregate(params, sums, round)
        if on_round is not None:
            on_round(round, params, strategy)
    return params
