"""The round engine: this process's share of a round's jobs trained, one reduction, the aggregate, the checks.

The synchronous and the asynchronous trainer both run their rounds through it; they differ only in which jobs a
round has (see ``lightfed.run.rounds`` and ``lightfed.asynchronous.buffered_rounds``).
"""

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

import torch
from lightning.fabric import Fabric
from torch import Tensor

from lightfed.attacks.collusion import HeldUpdates
from lightfed.core.message_bytes import received_bytes, rows_sent_bytes
from lightfed.core.messages import ClientPlan, ClientRows, ClientUpdate
from lightfed.core.sharding import AllReduce, CoordinateShards, local
from lightfed.core.sums import Sums
from lightfed.core.transforms import NO_TRANSFORMS, Accumulate, Pipeline
from lightfed.privacy.base import NO_PRIVACY, ClientPrivacy
from lightfed.run.client_training import ClientTraining, TrainingJob
from lightfed.run.divergence import divergence_error
from lightfed.run.server_paths import RoundJobs, SumsPath, server_path
from lightfed.strategies.base import Strategy, SumsStrategy


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
    all-reduce, aggregates on the strategy's server path (``lightfed.run.server_paths``: sums, asynchronous sums,
    or coordinate shards), and checks the result (finite; with ``check_replicas`` the same on every process).

    Client ``training`` delivers updates in lanes: each lane's go into its own sums (under one lock, so the strategy
    and ``on_client_end`` see one update at a time), and the lanes' sums are added in lane order. Clients trained
    together may be delivered as rows, in one operation per sum, where the strategy adds rows (``takes_rows``) on the
    plain sums path, every transform passes the round's updates unchanged and no colluding attack or
    ``on_client_end`` sees each one.
    """

    def __init__(
        self,
        fabric: Fabric,
        training: ClientTraining,
        strategy: Strategy,
        clients_per_round: int,
        fixed_process: bool,
        check_replicas: bool = False,
        on_client_end: Callable[[ClientUpdate], None] | None = None,
        privacy: ClientPrivacy = NO_PRIVACY,
        transforms: Pipeline = NO_TRANSFORMS,
    ) -> None:
        """``fixed_process``: client i always trains on process i % world (where its per-client state lives).
        ``on_client_end``: called with each update once the strategy has taken it. ``privacy``: its budget is checked
        on every process before any client of a round trains. ``transforms``: what each update goes through before
        the strategy takes it."""
        self.fabric, self.training, self.strategy = fabric, training, strategy
        self.client = client = training.reference
        self.fixed_process, self.check_replicas = fixed_process, check_replicas
        self.on_client_end, self.privacy = on_client_end, privacy
        self.transforms = transforms
        self.shards = CoordinateShards(client.flat.params.numel(), fabric.world_size, fabric.global_rank)

        def all_reduce(tensor: Tensor, op: str) -> Tensor:
            return cast(Tensor, fabric.all_reduce(tensor, reduce_op=op))

        # one process: no call of Fabric's, which costs a traversal of its argument each time, for nothing
        self.all_reduce: AllReduce = all_reduce if fabric.world_size > 1 else local
        self.path = server_path(strategy, self.shards, clients_per_round, self.all_reduce)
        buffers = client.flat.buffers.numel()
        sizes = {
            **self.path.sum_sizes(),
            **self.transforms.sizes,
            "_buffers": buffers,
            "_examples": 1,
            "_train_loss": 1,
            "_clients": 1,
            "_sent_bytes": 1,
            "_received_bytes": 1,
            "_stop": 1,
        }
        self.takes_rows = (  # clients trained together are added as rows where nothing between sees each update
            type(self.path) is SumsPath and cast(SumsStrategy, strategy).takes_rows and on_client_end is None
        )
        self.sums = Sums(sizes, fabric.device)
        self._lane_sums = [self.sums] + [Sums(sizes, fabric.device) for _ in range(training.lanes - 1)]
        self._lock = threading.Lock()

    def share(self, jobs: list[Job], rank: int | None = None) -> list[Job]:
        """The jobs process ``rank`` (default: this one) trains: every world-th block of ``training.block``
        consecutive jobs (which train together, the same on any number of processes), or client i on process
        i % world."""
        rank, world = self.fabric.global_rank if rank is None else rank, self.fabric.world_size
        if self.fixed_process:
            return [job for job in jobs if job.plan.client_id % world == rank]
        block = self.training.block
        return [job for start in range(0, len(jobs), block)[rank::world] for job in jobs[start : start + block]]

    def run(
        self,
        round: int,
        jobs: list[Job],
        params: Tensor,
        buffers: Tensor,
        stop_requested: threading.Event | None = None,
    ) -> RoundResult:
        """Round ``round`` from the global ``params``/``buffers``; ``jobs`` (every process's, in increasing client id
        order) are the same on every process. ``stop_requested`` is read just before the reduction: when it is set
        on any process, every process learns it from ``RoundResult.stop``."""
        sums, mine, path = self.sums, self.share(jobs), self.path
        position = {id(job): k for k, job in enumerate(jobs)}
        layout = RoundJobs(
            [job.plan.client_id for job in jobs],
            [job.staleness for job in jobs],
            [[position[id(job)] for job in self.share(jobs, rank)] for rank in range(self.fabric.world_size)],
            self.fabric.global_rank,
        )
        vectors = [{**job.package, **sent} for job, sent in zip(mine, path.received(layout), strict=True)]
        plans = [
            self.transforms.plan(self.strategy.configure_client(job.plan, received))
            for job, received in zip(mine, vectors, strict=True)
        ]
        self.privacy.check_budget(self.fabric, round, plans)
        for lane_sums in self._lane_sums:
            lane_sums.zero_()
        sums.add("_received_bytes", received_bytes([(job.params, job.buffers) for job in mine], vectors))
        path.begin(layout, params)
        held = HeldUpdates(self.client.attack, layout.client_ids, params)  # a colluding attack's stage

        def to_path(index: int) -> Accumulate:
            return lambda sums, update: path.add(sums, index, update, mine[index].staleness)

        def deliver(lane: int, index: int, update: ClientUpdate) -> None:
            sums = self._lane_sums[lane]
            with self._lock:
                if not held.takes(index, update):
                    sums.add("_sent_bytes", self.transforms.add(sums, update, round, to_path(index)))
                sums.add("_buffers", update.buffers, weight=update.num_examples)
                sums.add("_examples", update.num_examples)
                sums.add("_train_loss", update.train_loss)
                sums.add("_clients", 1)
                if self.on_client_end is not None:
                    self.on_client_end(update)

        def deliver_rows(lane: int, rows: ClientRows) -> None:
            sums = self._lane_sums[lane]
            with self._lock:
                cast(SumsStrategy, self.strategy).accumulate_rows(sums, rows)
                sums.add("_sent_bytes", rows_sent_bytes(rows))
                sums.add_rows("_buffers", rows.buffers, rows.num_examples)
                sums.add("_examples", sum(rows.num_examples))
                sums.add_rows("_train_loss", rows.train_losses)
                sums.add("_clients", len(rows))

        self.training.train(
            [TrainingJob(plan, job.params, job.buffers) for plan, job in zip(plans, mine, strict=True)],
            deliver,
            deliver_rows if self.takes_rows and not held.known and self.transforms.passes(layout.client_ids) else None,
        )
        for index, update in held.released(self.all_reduce):  # the attack's, through the transforms too
            sums.add("_sent_bytes", self.transforms.add(sums, update, round, to_path(index)))
        for lane_sums in self._lane_sums[1 : self.training.lanes]:
            sums.buffer.add_(lane_sums.buffer)
        sums.add("_stop", float(stop_requested is not None and stop_requested.is_set()))
        sums.buffer.copy_(self.all_reduce(sums.buffer, "sum"))
        transformed = self.transforms.recovered(sums, round)
        params = self.transforms.stepped(params, path.aggregate(round, layout, sums, params))
        buffers = (sums["_buffers"] / sums["_examples"]).to(buffers.dtype)
        self._check(round, params, buffers, layout.client_ids)
        metrics = {
            "round/clients": float(sums["_clients"]),
            "round/client_train_loss": float(sums["_train_loss"] / sums["_clients"]),
            "communication/sent_bytes": float(sums["_sent_bytes"]),
            "communication/received_bytes": float(sums["_received_bytes"]),
            **self.training.logged().compute(self.fabric, self.client.module),
            **{f"strategy/{k}": v for k, v in self.strategy.metrics().items()},
            **transformed,
        }
        return RoundResult(params, buffers, metrics, float(sums["_stop"]) > 0)

    def _check(self, round: int, params: Tensor, buffers: Tensor, client_ids: list[int]) -> None:
        if self.check_replicas:
            weights = torch.cat([params, buffers.to(params.dtype)])
            if not torch.equal(self.fabric.broadcast(weights.clone()), weights):
                raise RuntimeError(
                    f"process {self.fabric.global_rank} holds other global weights than process 0 after round "
                    f"{round + 1}: a strategy's aggregate depends on something that differs between processes"
                )
        if not (torch.isfinite(params).all() and torch.isfinite(buffers).all()):
            raise divergence_error(round + 1, self.client.data, client_ids)
