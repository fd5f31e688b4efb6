"""What a strategy and a transform are set up with, once per run."""

from dataclasses import dataclass

from torch import Tensor

from lightfed.core.client_states import ClientStates
from lightfed.core.disk_client_states import DiskClientStates
from lightfed.core.sharding import CoordinateShards


@dataclass(frozen=True)
class ServerContext:
    """What a strategy is set up with, once per run (and before a resume).

    Examples:
        >>> import torch
        >>> from lightfed.core.server_context import ServerContext
        >>> context = ServerContext(params=torch.zeros(10), num_clients=100, world_size=4, rank=1)
        >>> context.num_params, context.shard  # the coordinates process 1 owns on the sharded path
        (10, slice(3, 6, None))
    """

    params: Tensor  # the initial global parameters, flat fp32: their number, dtype and device
    num_clients: int
    world_size: int = 1
    rank: int = 0
    clients_per_round: int = 0  # clients the run samples each round (0: not given)
    seed: int = 0  # the run's seed (``trainer.seed``), the same on every process
    sampled_clients: int = 0  # clients the run samples from (0: all num_clients; fewer with trainer.unseen_clients)
    client_states: str = "memory"  # where ``Strategy.client_states`` lives: "memory" or "disk" (trainer.client_states)
    client_states_folder: str | None = None  # with "disk": where each process keeps its files (null: a temporary one)
    rounds: int = 0  # rounds the run trains (trainer.rounds; 0: not given)

    @property
    def num_params(self) -> int:
        return self.params.numel()

    @property
    def shard(self) -> slice:
        """The coordinates this process owns on the sharded path."""
        return CoordinateShards(self.num_params, self.world_size, self.rank).local

    def client_store(self) -> ClientStates:
        """A new per-client store where ``client_states`` puts it: in memory, or on disk (in
        ``client_states_folder``)."""
        return ClientStates() if self.client_states == "memory" else DiskClientStates(self.client_states_folder)
