"""The round engine: this process's share of a round's jobs trained, one reduction, the aggregate, the checks.

The synchronous and the asynchronous trainer both run their rounds through it; they differ only in which jobs a
round has (see ``lightfed.core.rounds`` and ``lightfed.asynchronous.trainer``).
"""

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from lightning.fabric import Fabric
from torch import Tensor

from lightfed.core.client import ClientTrainer
from lightfed.core.client_workers import ClientWorkers
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.sharding import CoordinateShards
from lightfed.core.sums import Sums
from lightfed.core.workspace import Workspace
from lightfed.errors import DivergenceError
from lightfed.strategies.base import Strategy
from lightfed.strategies.sharded_base import ShardedRound

PER_CLIENT = ("num_examples", "num_steps", "local_time", "staleness")  # per-client scalars of the sharded path


@dataclass(frozen=True, eq=False)
class Job:
    """One client's training in a round: its plan (before the strategy configures it), the global weights it starts
    from with what the strategy published beside them, and how many rounds old those weights are when its update is
    aggregated (0 in synchronous rounds)."""

    plan: ClientPlan
    params: Tensor
    buffers: Tensor
    staleness: int = 0
    package: Mapping[str, Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundResult:
    """The next global weights, the round's scalars, and whether any process asked to stop after it."""

    params: Tensor
    buffers: Tensor
    metrics: dict[str, float]
    stop: bool


class RoundEngine:
    """Trains this process's share of a round's jobs, reduces the bookkeeping and the strategy's sums in one
    all-reduce, aggregates (sums path) or exchanges the deltas by coordinate slice and aggregates each slice (sharded
    path), and checks the result (finite; with ``check_replicas`` the same on every process).

    With several ``workers`` each adds its clients' updates into its own sums (under one lock, so the strategy and
    ``on_client_end`` see one update at a time), and the workers' sums are added in worker order.
    """

    def __init__(
        self,
        fabric: Fabric,
        workers: ClientWorkers,
        strategy: Strategy,
        clients_per_round: int,
        fixed_process: bool,
        check_replicas: bool = False,
        on_client_end: Callable[[ClientUpdate], None] = lambda update: None,
        check_plans: Callable[[int, list[ClientPlan]], None] = lambda round, plans: None,
    ) -> None:
        """``fixed_process``: client i always trains on process i % world (where its per-client state lives).
        ``check_plans``: called on every process with its configured plans before any trains (a collective call)."""
        self.fabric, self.workers, self.strategy = fabric, workers, strategy
        self.client = client = workers.clients[0]
        self.fixed_process, self.check_replicas = fixed_process, check_replicas
        self.on_client_end, self.check_plans = on_client_end, check_plans
        self.sharded = strategy.server_path == "sharded"
        buffers = client.flat.buffers.numel()
        sizes = {**strategy.sum_sizes(), "_buffers": buffers, "_examples": 1, "_train_loss": 1, "_clients": 1, "_stop": 1}
        if self.sharded:
            self.columns = (*PER_CLIENT, *strategy.report_scalars)
            sizes["_per_client"] = clients_per_round * len(self.columns)
        self.sums = Sums(sizes, fabric.device)
        self._worker_sums = [self.sums] + [Sums(sizes, fabric.device) for _ in range(workers.count - 1)]
        self._lock = threading.Lock()
        self.shards = CoordinateShards(client.flat.params.numel(), fabric.world_size, fabric.global_rank)
        self._workspace = Workspace()  # a sharded strategy's rows of deltas and vectors, kept from round to round

    def share(self, jobs: list[Job], rank: int | None = None) -> list[Job]:
        """The jobs process ``rank`` (default: this one) trains: a balanced slice, or client i on process i % world."""
        rank, world = self.fabric.global_rank if rank is None else rank, self.fabric.world_size
        if self.fixed_process:
            return [job for job in jobs if job.plan.client_id % world == rank]
        return jobs[rank::world]

    def run(
        self, round: int, jobs: list[Job], params: Tensor, buffers: Tensor, stop_requested: Callable[[], bool] = bool
    ) -> RoundResult:
        """Round ``round`` from the global ``params``/``buffers``; ``jobs`` (every process's, in increasing client id
        order) are the same on every process. ``stop_requested()`` is asked just before the reduction: when it is
        true on any process, every process learns it from ``RoundResult.stop``."""
        sums, mine = self.sums, self.share(jobs)
        rows_of = [[jobs.index(job) for job in self.share(jobs, rank)] for rank in range(self.fabric.world_size)]
        downloads = self._downloads(jobs, rows_of) if self.sharded else [{} for _ in mine]
        plans = [self.strategy.configure_job(job.plan, {**job.package, **download}) for job, download in zip(mine, downloads)]
        self.check_plans(round, plans)
        for worker_sums in self._worker_sums:
            worker_sums.zero_()
        rows = None
        if self.sharded:  # per job: its delta, then the vectors it reports
            shape = (len(mine), 1 + len(self.strategy.report_vectors), params.numel())
            rows = self._workspace.get("rows", shape, torch.empty(0, device=params.device))  # float32

        def train(worker: int, client: ClientTrainer, index: int) -> None:
            job, sums = mine[index], self._worker_sums[worker]
            update = client.train(plans[index], job.params, job.buffers)
            with self._lock:
                self.strategy.accumulate_job(sums, update, job.staleness)
                if rows is not None:
                    position = rows_of[self.fabric.global_rank][index]
                    self._keep_for_exchange(sums, rows[index], position, update, job.staleness)
                sums.add("_buffers", update.buffers, weight=update.num_examples)
                sums.add("_examples", update.num_examples)
                sums.add("_train_loss", update.train_loss)
                sums.add("_clients", 1)
                self.on_client_end(update)

        self.workers.run(len(mine), train)
        for worker_sums in self._worker_sums[1 : self.workers.count]:
            sums.buffer.add_(worker_sums.buffer)
        sums.add("_stop", float(stop_requested()))
        sums.buffer.copy_(self.fabric.all_reduce(sums.buffer, reduce_op="sum"))
        if rows is None:
            params = self.strategy.aggregate_buffer(params, sums, round, [job.staleness for job in jobs])
        else:
            params = self._aggregate_sharded(round, jobs, rows_of, rows, params)
        buffers = (sums["_buffers"] / sums["_examples"]).to(buffers.dtype)
        self._check(round, params, buffers)
        metrics = {
            "round/clients": float(sums["_clients"]),
            "round/client_train_loss": float(sums["_train_loss"] / sums["_clients"]),
            **self.workers.logged().compute(self.fabric, self.client.module),
            **{f"strategy/{k}": v for k, v in self.strategy.metrics().items()},
        }
        return RoundResult(params, buffers, metrics, float(sums["_stop"]) > 0)

    def _keep_for_exchange(self, sums: Sums, row: Tensor, position: int, update: ClientUpdate, staleness: int) -> None:
        """A sharded strategy's view of one update: its delta and reported vectors into ``row``, its numbers into
        the per-client ``sums`` at the job's ``position`` in the round (zero elsewhere, so the all-reduce gathers them)."""
        report = self.strategy.client_report(update)
        row[0].copy_(update.delta)
        for k, name in enumerate(self.strategy.report_vectors, start=1):
            if name in report:
                row[k].copy_(report[name])
            else:
                row[k].zero_()
        numbers = [update.num_examples, update.num_steps, update.local_time, staleness]
        numbers += [float(report.get(name, 0.0)) for name in self.strategy.report_scalars]
        start = position * len(self.columns)
        sums["_per_client"][start : start + len(self.columns)] = torch.tensor(numbers, dtype=torch.float64)

    def _downloads(self, jobs: list[Job], rows_of: list[list[int]]) -> list[dict[str, Tensor]]:
        """The whole per-client vectors (``ShardedStrategy.client_vectors``) of this process's jobs, assembled from
        every process's slices: one all-to-all per vector name."""
        slices = self.strategy.client_vectors([job.plan.client_id for job in jobs])
        whole = {name: self.shards.assemble(rows, rows_of) for name, rows in slices.items()}
        return [{name: vectors[k] for name, vectors in whole.items()} for k in range(len(rows_of[self.fabric.global_rank]))]

    def _aggregate_sharded(
        self, round: int, jobs: list[Job], rows_of: list[list[int]], rows: Tensor, params: Tensor
    ) -> Tensor:
        """One all-to-all gives this process its slice of every client's delta (and reported vectors); the new
        slices are gathered back."""
        received = self.shards.exchange(rows, [len(rows) for rows in rows_of])
        arrival = [row for rows in rows_of for row in rows]  # row i of ``received`` is jobs[arrival[i]]
        sliced = received
        if arrival != list(range(len(arrival))):
            sliced = torch.empty_like(received)
            sliced[arrival] = received
        columns = self.sums["_per_client"][: len(jobs) * len(self.columns)].reshape(len(jobs), len(self.columns)).T
        per_client = dict(zip(self.columns, columns))
        updates = ShardedRound(
            round,
            [job.plan.client_id for job in jobs],
            sliced[:, 0],
            *(per_client[name] for name in PER_CLIENT),
            sums=self.sums,
            all_reduce=lambda tensor, op: self.fabric.all_reduce(tensor, reduce_op=op),
            reports={
                **{name: per_client[name] for name in self.strategy.report_scalars},
                **{name: sliced[:, k] for k, name in enumerate(self.strategy.report_vectors, start=1)},
            },
        )
        shard = self.strategy.aggregate_shard(params[self.shards.local], updates)
        return self.shards.gather(shard)

    def _check(self, round: int, params: Tensor, buffers: Tensor) -> None:
        if self.check_replicas:
            weights = torch.cat([params, buffers.to(params.dtype)])
            if not torch.equal(self.fabric.broadcast(weights.clone()), weights):
                raise RuntimeError(
                    f"process {self.fabric.global_rank} holds other global weights than process 0 after round "
                    f"{round + 1}: a strategy's aggregate depends on something that differs between processes"
                )
        if not (torch.isfinite(params).all() and torch.isfinite(buffers).all()):
            raise DivergenceError(
                f"the global weights became NaN/Inf in round {round + 1}; lower the learning rate (model lr or "
                "strategy.server_lr)"
            )
