"""How a round's updates become the next global model, one class per server path: sums (and their asynchronous,
staleness-aware form) and coordinate shards. The round engine picks one by the strategy's protocol."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast

import torch
from torch import Tensor

from lightfed.core.messages import ClientUpdate
from lightfed.core.sharding import CoordinateShards
from lightfed.core.sums import Sums
from lightfed.core.workspace import Workspace
from lightfed.strategies.async_base import AsyncStrategy
from lightfed.strategies.base import Strategy, SumsStrategy
from lightfed.strategies.sharded_base import ShardedRound, ShardedStrategy

PER_CLIENT = ("num_examples", "num_steps", "local_time", "staleness")  # per-client scalars of the sharded path
AllReduce = Callable[[Tensor, str], Tensor]


@dataclass(frozen=True)
class RoundJobs:
    """A round's jobs as every process sees them: client ids and stalenesses in increasing client id order, and
    ``rows_of[rank]``, the positions of process ``rank``'s jobs among them."""

    client_ids: list[int]
    staleness: list[int]
    rows_of: list[list[int]]
    rank: int  # this process

    @property
    def mine(self) -> list[int]:
        """The positions of this process's jobs."""
        return self.rows_of[self.rank]


class ServerPath(Protocol):
    """One round of a server path."""

    def sum_sizes(self) -> dict[str, int]:
        """The sums this path adds into, besides the engine's own."""

    def received(self, jobs: RoundJobs) -> list[dict[str, Tensor]]:
        """What each of this process's jobs receives beside the model (a collective call)."""

    def begin(self, jobs: RoundJobs, params: Tensor) -> None:
        """Before this process's jobs train."""

    def add(self, sums: Sums, index: int, update: ClientUpdate, staleness: int) -> None:
        """Takes the update of this process's ``index``-th job (one update at a time)."""

    def aggregate(self, round: int, jobs: RoundJobs, sums: Sums, params: Tensor) -> Tensor:
        """The next global parameters, once ``sums`` are reduced over every process."""


class SumsPath:
    """Each update goes into the strategy's sums; the reduced sums give the next model."""

    def __init__(self, strategy: SumsStrategy | AsyncStrategy) -> None:
        self.strategy = strategy

    def sum_sizes(self) -> dict[str, int]:
        return self.strategy.sum_sizes()

    def received(self, jobs: RoundJobs) -> list[dict[str, Tensor]]:
        return [{} for _ in jobs.mine]  # an asynchronous job receives its model version's package (``Job.package``)

    def begin(self, jobs: RoundJobs, params: Tensor) -> None:
        pass

    def add(self, sums: Sums, index: int, update: ClientUpdate, staleness: int) -> None:
        cast(SumsStrategy, self.strategy).accumulate(sums, update)

    def aggregate(self, round: int, jobs: RoundJobs, sums: Sums, params: Tensor) -> Tensor:
        return cast(SumsStrategy, self.strategy).aggregate(params, sums, round)


class AsyncPath(SumsPath):
    """The sums path with each update's staleness (how many versions old the model it trained from is)."""

    def add(self, sums: Sums, index: int, update: ClientUpdate, staleness: int) -> None:
        cast(AsyncStrategy, self.strategy).accumulate(sums, update, staleness)

    def aggregate(self, round: int, jobs: RoundJobs, sums: Sums, params: Tensor) -> Tensor:
        return cast(AsyncStrategy, self.strategy).aggregate(params, sums, round, jobs.staleness)


class ShardedPath:
    """Each process keeps its jobs' deltas (and reported vectors) as rows; one all-to-all gives every process its
    coordinate slice of every row, the strategy turns that into its slice of the next model, and the slices are
    gathered back. Per-client scalars travel in the sums, at each job's position in the round."""

    def __init__(
        self, strategy: ShardedStrategy, shards: CoordinateShards, clients_per_round: int, all_reduce: AllReduce
    ) -> None:
        self.strategy, self.shards, self.all_reduce = strategy, shards, all_reduce
        self.columns = (*PER_CLIENT, *strategy.report_scalars)
        self.clients_per_round = clients_per_round
        self.workspace = Workspace()  # the rows of deltas and vectors, kept from round to round

    def sum_sizes(self) -> dict[str, int]:
        return {**self.strategy.sum_sizes(), "_per_client": self.clients_per_round * len(self.columns)}

    def received(self, jobs: RoundJobs) -> list[dict[str, Tensor]]:
        """The whole per-client vectors (``ShardedStrategy.client_vectors``) of this process's jobs, assembled from
        every process's slices: one all-to-all per vector name."""
        slices = self.strategy.client_vectors(jobs.client_ids)
        whole = {name: self.shards.assemble(rows, jobs.rows_of) for name, rows in slices.items()}
        return [{name: vectors[k] for name, vectors in whole.items()} for k in range(len(jobs.mine))]

    def begin(self, jobs: RoundJobs, params: Tensor) -> None:
        self.positions = jobs.mine
        shape = (len(self.positions), 1 + len(self.strategy.report_vectors), params.numel())
        self.rows = self.workspace.get("rows", shape, torch.empty(0, device=params.device))  # float32

    def add(self, sums: Sums, index: int, update: ClientUpdate, staleness: int) -> None:
        """The update's delta and reported vectors into its row, its numbers into the per-client sums at its position
        (zero elsewhere, so the all-reduce gathers them)."""
        self.strategy.accumulate(sums, update)
        report, row = self.strategy.client_report(update), self.rows[index]
        row[0].copy_(update.delta)
        for k, name in enumerate(self.strategy.report_vectors, start=1):
            vector = report.get(name)
            if isinstance(vector, Tensor):
                row[k].copy_(vector)
            else:
                row[k].zero_()
        numbers = [update.num_examples, update.num_steps, update.local_time, staleness]
        numbers += [float(report.get(name, 0.0)) for name in self.strategy.report_scalars]
        start = self.positions[index] * len(self.columns)
        sums["_per_client"][start : start + len(self.columns)] = torch.tensor(numbers, dtype=torch.float64)

    def aggregate(self, round: int, jobs: RoundJobs, sums: Sums, params: Tensor) -> Tensor:
        received = self.shards.exchange(self.rows, [len(rows) for rows in jobs.rows_of])
        arrival = [row for rows in jobs.rows_of for row in rows]  # row i of ``received`` is job arrival[i]
        sliced = received
        if arrival != list(range(len(arrival))):
            sliced = torch.empty_like(received)
            sliced[arrival] = received
        count = len(arrival)
        columns = sums["_per_client"][: count * len(self.columns)].reshape(count, len(self.columns)).T
        per_client = dict(zip(self.columns, columns, strict=True))
        updates = ShardedRound(
            round,
            jobs.client_ids,
            sliced[:, 0],
            per_client["num_examples"],
            per_client["num_steps"],
            per_client["local_time"],
            per_client["staleness"],
            sums=sums,
            all_reduce=self.all_reduce,
            reports={
                **{name: per_client[name] for name in self.strategy.report_scalars},
                **{name: sliced[:, k] for k, name in enumerate(self.strategy.report_vectors, start=1)},
            },
        )
        return self.shards.gather(self.strategy.aggregate_shard(params[self.shards.local], updates))


def server_path(
    strategy: Strategy, shards: CoordinateShards, clients_per_round: int, all_reduce: AllReduce
) -> ServerPath:
    """The path of the strategy's protocol."""
    if isinstance(strategy, ShardedStrategy):
        return ShardedPath(strategy, shards, clients_per_round, all_reduce)
    if isinstance(strategy, AsyncStrategy):
        return AsyncPath(strategy)
    if isinstance(strategy, SumsStrategy):
        return SumsPath(strategy)
    raise TypeError(f"{type(strategy).__name__} is not a SumsStrategy, ShardedStrategy or AsyncStrategy")
