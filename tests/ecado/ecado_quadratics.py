"""Heterogeneous quadratic clients driven through a strategy's real client rules and server code, without Fabric,
on one process or sharded over threads that stand in for processes.

Client i: F_i(x) = (x - b_i)' A_i (x - b_i) / 2 (its mean loss), |D_i| examples, batch size B = mean |D_i|; the
optimum of sum_i |D_i| F_i is known in closed form. One local step is one full-gradient step at the client's
current point, through the rule the strategy built (``adjust``, or the rule's own step when ``takes_step``).
"""

import copy
import threading
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch
from torch import Tensor, nn

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.seeding import sample_clients
from lightfed.core.workspace import Workspace
from lightfed.strategies.base import ServerContext
from lightfed.strategies.sharded_base import ShardedRound, ShardedStrategy


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
        self.num_train_examples = int(sizes.sum())

    def client_size(self, client_id: int) -> int:
        return int(self.sizes[client_id])

    def client_batches(self, client_id, generator, epochs=None, steps=None):
        return iter([None] * (steps or 1))

    def client_subset(self, client_id, positions, generator=None):
        return None  # the quadratic is the same on every sample


class QuadraticContext:
    """Stands in for ``LocalContext``: ``module``, ``data``, ``flat``, ``lr``, ``scales_gradients``, ``workspace`` and
    ``recompute_gradient``."""

    def __init__(self, problem: Quadratics, client_id: int, params: Tensor, lr: float) -> None:
        self.A = torch.tensor(problem.A[client_id], dtype=params.dtype)
        self.b = torch.tensor(problem.b[client_id], dtype=params.dtype)
        self.module = QuadraticModule(self.A, self.b, params)
        self.data = QuadraticData(problem.sizes)
        self.lr = lr
        self.scales_gradients = False
        self.flat = SimpleNamespace(params=params.clone(), grads=torch.zeros_like(params))
        self.workspace = Workspace()

    def recompute_gradient(self) -> Tensor:
        r = self.flat.params - self.b
        self.flat.grads.copy_(self.A @ r)
        return r @ (self.A @ r) / 2


def train_client(
    strategy: ShardedStrategy,
    problem: Quadratics,
    plan: ClientPlan,
    params: Tensor,
    lr: float,
    package: dict | None = None,
) -> ClientUpdate:
    """``steps`` local steps of the client loop (lr: the optimizer's learning rate) through the plan's rule;
    ``package``: the whole vectors the client is sent (default: the strategy's own, on one process)."""
    if package is None:
        package = {name: rows[0] for name, rows in strategy.client_vectors([plan.client_id]).items()}
    plan = strategy.configure_client(plan, package)
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


class ThreadGroup:
    """``world`` threads standing in for processes: an all-reduce and an all-gather that wait for every rank."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.barrier = threading.Barrier(world, timeout=300)  # a rank that failed breaks it
        self.values: list = [None] * world

    def _exchange(self, rank: int, value: Tensor) -> list[Tensor]:
        self.values[rank] = value.clone()
        self.barrier.wait()
        values = list(self.values)
        self.barrier.wait()
        return values

    def all_reduce(self, rank: int, tensor: Tensor, op: str) -> Tensor:
        stacked = torch.stack(self._exchange(rank, tensor))
        return {"sum": stacked.sum(0), "max": stacked.max(0).values, "min": stacked.min(0).values}[op]

    def all_gather(self, rank: int, tensor: Tensor) -> Tensor:
        """Slices joined along the last dimension, in rank order."""
        return torch.cat(self._exchange(rank, tensor), dim=-1)


def sharded_round(
    strategy: ShardedStrategy, round: int, updates: list[ClientUpdate], params: Tensor, all_reduce=None
) -> Tensor:
    """What the round engine hands a sharded strategy: this process's slice of the deltas and reported vectors (the
    strategy's ``shard``), the per-client numbers whole; returns its slice of the next x_c."""
    shard = strategy.shard
    reports = [strategy.client_report(update) for update in updates]
    zeros = torch.zeros_like(params)
    sharded = ShardedRound(
        round,
        [update.client_id for update in updates],
        torch.stack([update.delta[shard] for update in updates]),
        *(
            torch.tensor([float(getattr(u, name)) for u in updates], dtype=torch.float64)
            for name in ("num_examples", "num_steps", "local_time")
        ),
        staleness=torch.zeros(len(updates), dtype=torch.float64),
        sums={},
        all_reduce=all_reduce or (lambda tensor, op: tensor),
        reports={
            **{
                name: torch.tensor([float(r.get(name, 0.0)) for r in reports], dtype=torch.float64)
                for name in strategy.report_scalars
            },
            **{
                name: torch.stack([r.get(name, zeros)[shard].to(params) for r in reports])
                for name in strategy.report_vectors
            },
        },
    )
    return strategy.aggregate_shard(params[shard], sharded)


def run_rounds(
    strategy: ShardedStrategy,
    problem: Quadratics,
    rounds: int,
    per_round: int,
    steps: np.ndarray,
    lrs: np.ndarray,
    x0: Tensor,
    seed: int = 0,
    on_round=None,
    world: int = 1,
) -> Tensor:
    """Synchronous rounds: sample, train each client through its rule, solve the server's round; returns x_c.

    ``steps``: local steps per client (n,), or per round and client (rounds, n). ``world`` > 1: the server solve is
    sharded by coordinate over that many threads standing in for processes, each with its own copy of ``strategy``
    (``strategy`` is rank 0's; ``on_round`` sees it); every thread trains every client, as the clients' results do
    not depend on where they train. ``strategies`` holds every rank's strategy afterwards.
    """
    strategies = [strategy, *(copy.deepcopy(strategy) for _ in range(world - 1))]
    run_rounds.strategies = strategies
    group, results = ThreadGroup(world), [None] * world
    n = len(problem.sizes)

    def rank_loop(rank: int) -> None:
        mine = strategies[rank]
        mine.setup(ServerContext(x0.clone(), n, world, rank))
        params = x0.clone()
        all_reduce = (lambda tensor, op: group.all_reduce(rank, tensor, op)) if world > 1 else None
        for round in range(rounds):
            clients = sample_clients(seed, round, n, per_round)
            downloads = {
                name: group.all_gather(rank, rows) if world > 1 else rows
                for name, rows in mine.client_vectors(clients).items()
            }
            updates = []
            for k, client_id in enumerate(clients):
                plan = ClientPlan(
                    client_id,
                    round,
                    seed=1000 * round + client_id,
                    steps=int(steps[client_id] if steps.ndim == 1 else steps[round, client_id]),
                )
                package = {name: rows[k] for name, rows in downloads.items()}
                updates.append(train_client(mine, problem, plan, params, float(lrs[client_id]), package))
            shard = sharded_round(mine, round, updates, params, all_reduce)
            params = group.all_gather(rank, shard) if world > 1 else shard
            if on_round is not None and rank == 0:
                on_round(round, params, mine)
        results[rank] = params

    if world == 1:
        rank_loop(0)
    else:
        threads = [threading.Thread(target=rank_loop, args=(rank,)) for rank in range(world)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        if any(result is None for result in results):
            raise RuntimeError("a rank of the sharded quadratics failed (its traceback is printed above)")
    return results[0]
