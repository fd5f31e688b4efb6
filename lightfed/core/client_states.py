"""Per-client persistent state (control variates and the like), kept where the client trains or by coordinate."""

import torch
import torch.distributed as dist
from lightning.fabric import Fabric
from torch import Tensor

State = dict[int, dict[str, Tensor]]


class ClientStates:
    """Named tensors per client, held on the CPU by default (memory: one vector per client and name).

    With several processes each process holds the clients it trains (client ``i`` trains on process
    ``i % world_size``); ``gather`` collects all of them for a checkpoint.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self._states: State = {}

    def get(self, client_id: int, name: str) -> Tensor | None:
        return self._states.get(client_id, {}).get(name)

    def set(self, client_id: int, name: str, value: Tensor) -> None:
        self._states.setdefault(client_id, {})[name] = value.detach().to(self.device, copy=True)

    def __len__(self) -> int:
        return len(self._states)

    def state_dict(self) -> State:
        return {client_id: dict(state) for client_id, state in self._states.items()}

    def load_state_dict(self, state: State) -> None:
        self._states = {client_id: {k: v.to(self.device) for k, v in s.items()} for client_id, s in state.items()}

    def gather(self, fabric: Fabric) -> State | None:
        """Every process's states, on process 0 (None elsewhere): a collective call."""
        shards = self._gather_objects(fabric)
        return None if shards is None else {i: s for shard in shards for i, s in shard.items()}

    def load_shared(self, state: State, rank: int, world: int) -> None:
        """Keeps this process's part of the states ``gather`` collected (on any number of processes)."""
        self.load_state_dict({i: s for i, s in state.items() if i % world == rank})

    def _gather_objects(self, fabric: Fabric) -> list[State] | None:
        if fabric.world_size == 1:
            return [self.state_dict()]
        shards = [None] * fabric.world_size if fabric.is_global_zero else None
        dist.gather_object(self.state_dict(), shards, dst=0)
        return shards


class ShardedClientStates(ClientStates):
    """Per-client state of a sharded strategy: every process holds its slice ``shard`` of each client's vectors
    (memory per process falls as 1 / world size); 0-d tensors are the same on every process."""

    def __init__(self, shard: slice, device: torch.device | str = "cpu") -> None:
        super().__init__(device)
        self.shard = shard

    def gather(self, fabric: Fabric) -> State | None:
        """Whole vectors, the slices joined in process order, on process 0 (None elsewhere): a collective call."""
        shards = self._gather_objects(fabric)
        if shards is None:
            return None
        first = shards[0]
        return {
            i: {k: v if v.dim() == 0 else torch.cat([shard[i][k] for shard in shards]) for k, v in state.items()}
            for i, state in first.items()
        }

    def load_shared(self, state: State, rank: int, world: int) -> None:
        self.load_state_dict({i: {k: v if v.dim() == 0 else v[self.shard] for k, v in s.items()} for i, s in state.items()})
