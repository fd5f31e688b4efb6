"""The second server path: strategies that need every active client's whole update, sharded by coordinate."""

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from torch import Tensor

from lightfed.core.client_states import ProcessStore, ShardedVectors
from lightfed.core.messages import ClientUpdate
from lightfed.core.sharded_client_states import ShardedClientStates
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies.base import ServerContext, Strategy


@dataclass(frozen=True)
class ShardedRound:
    """A round's updates as one process of a sharded strategy sees them: its slice of every active client's delta.

    Rows are the round's clients in increasing id order, the same on every process; per-client scalars are whole.

    Examples:
        >>> import torch
        >>> from lightfed.strategies import ShardedRound
        >>> per_client = torch.ones(3, dtype=torch.float64)
        >>> updates = ShardedRound(
        ...     round=0,
        ...     client_ids=[0, 4, 7],
        ...     deltas=torch.zeros(3, 5),
        ...     num_examples=per_client,
        ...     num_steps=per_client,
        ...     local_time=per_client,
        ...     staleness=0 * per_client,
        ...     sums={},
        ...     all_reduce=lambda tensor, op: tensor,  # one process: nothing to reduce
        ... )
        >>> updates.deltas.shape
        torch.Size([3, 5])
    """

    round: int
    client_ids: list[int]
    deltas: Tensor  # [clients, slice length], fp32
    num_examples: Tensor  # [clients], float64
    num_steps: Tensor  # [clients], float64
    local_time: Tensor  # [clients], float64
    staleness: Tensor  # [clients], float64
    sums: Mapping[str, Tensor]  # the strategy's own sums over the round (``sum_sizes``), reduced
    all_reduce: Callable[[Tensor, str], Tensor]  # (tensor, "sum" | "max" | "min") over every process's slice
    # report_scalars [clients], report_vectors [clients, slice]
    reports: Mapping[str, Tensor] = field(default_factory=dict)


class ShardedStrategy(Strategy, ABC):
    """A strategy whose aggregate needs every active client's whole update (median, trimmed mean, Krum, the
    circuit solves), not sums.

    With N processes, process p owns the contiguous slice ``self.shard`` of the d coordinates (from the
    ``ServerContext``): after the round, one all-to-all hands it that slice of every active client's delta,
    ``aggregate_shard`` turns it into that slice of the next global model, and the slices are gathered back. Maxima
    over the whole vector take ``updates.all_reduce``; sums over it (norms, means) ``CoordinateSums(self.num_params,
    self.shard, updates.all_reduce)``, the same bits on any number of processes. Per-client state in
    ``self.client_states`` is a ``ShardedClientStates``: each process keeps its slice of every client's vectors
    (memory per process ~ 1 / N). Clients may train on any process.

    Examples:
        A coordinate-wise maximum of the deltas, on one process (which owns every coordinate):

        >>> import torch
        >>> from lightfed.strategies import ServerContext, ShardedRound, ShardedStrategy
        >>> class CoordinateMax(ShardedStrategy):
        ...     def aggregate_shard(self, params, updates):
        ...         return params + updates.deltas.max(dim=0).values
        >>> strategy = CoordinateMax()
        >>> strategy.setup(ServerContext(torch.zeros(2), num_clients=3))
        >>> strategy.shard
        slice(0, 2, None)
        >>> deltas = torch.tensor([[1.0, -1.0], [3.0, 0.0], [2.0, 5.0]])
        >>> ones = torch.ones(3, dtype=torch.float64)
        >>> updates = ShardedRound(0, [0, 1, 2], deltas, ones, ones, ones, 0 * ones, {}, lambda t, op: t)
        >>> strategy.aggregate_shard(torch.zeros(2), updates)
        tensor([3., 5.])

        Its per-client state lives in memory:

        >>> CoordinateMax().setup(ServerContext(torch.zeros(2), num_clients=3, client_states="disk"))
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: CoordinateMax keeps its per-client state sharded by coordinate ...
    """

    report_scalars: tuple[str, ...] = ()  # per-client numbers of ``client_report``, seen whole by every process
    report_vectors: tuple[str, ...] = ()  # per-client d-vectors of ``client_report``, sharded like the deltas

    def setup(self, context: ServerContext) -> None:
        if context.client_states != "memory":
            raise ConfigError(
                f"{type(self).__name__} keeps its per-client state sharded by coordinate across processes, in memory: "
                'set trainer.client_states "memory" (the disk store is for the sums and asynchronous paths)'
            )
        super().setup(context)
        self.shard = context.shard
        self.client_states = ShardedClientStates(self.shard, self.num_params)

    def client_vectors(self, client_ids: list[int]) -> dict[str, Tensor]:
        """This process's slices (``[clients, slice length]``, rows in ``client_ids`` order) of the vectors each of a
        round's clients is sent; the client gets them whole in ``configure_client``'s ``received``. Default: none."""
        return {}

    def client_report(self, update: ClientUpdate) -> Mapping[str, float | Tensor]:
        """On the process that trained the client: its ``report_scalars`` and ``report_vectors`` (one it does not
        report arrives as zeros). Default: taken from ``update.report``."""
        return {
            name: update.report[name] for name in (*self.report_scalars, *self.report_vectors) if name in update.report
        }

    def sum_sizes(self) -> dict[str, int]:
        """Sums besides the sharded deltas. Default: none."""
        return {}

    def accumulate(self, sums: Sums, update: ClientUpdate) -> None:
        """Adds into the strategy's own sums. Default: nothing."""

    @abstractmethod
    def aggregate_shard(self, params: Tensor, updates: ShardedRound) -> Tensor:
        """This process's slice of the next global parameters from its slice ``params`` of the current ones."""

    def sharded_state(self) -> dict[str, Tensor]:
        """This process's slices of the server's own coordinate vectors (saved per process, re-sliced on a resume
        with another number of processes). Default: none."""
        return {}

    def stores(self) -> dict[str, ProcessStore]:
        return {**super().stores(), "server": ShardedVectors(self.sharded_state, self.shard, self.num_params)}
