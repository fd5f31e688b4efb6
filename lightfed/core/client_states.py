"""Per-client persistent state (control variates and the like), kept where the client trains (or by coordinate:
``lightfed.core.sharded_client_states``), and the per-process stores the run saves in each process's own checkpoint
file."""

from collections.abc import Callable
from operator import itemgetter
from typing import Any, Protocol

import torch
from torch import Tensor

from lightfed.core.process_states import LINKED, Read
from lightfed.core.sharding import CoordinateShards
from lightfed.errors import ConfigError

State = dict[int, dict[str, Tensor]]
ReadPart = Callable[[int], Any]  # process rank -> what one store of that process wrote


class ProcessStore(Protocol):
    """What one process alone holds, saved in its own checkpoint file and restored for any number of processes."""

    def process_state(self) -> Any:
        """What this process writes."""

    def load_process_states(self, read: ReadPart, saved_world: int, rank: int, world: int) -> None:
        """Restores this process's part of what ``saved_world`` processes wrote (``read(rank)``: one's
        ``process_state``)."""


class HoldsStores(Protocol):
    def stores(self) -> dict[str, ProcessStore]: ...


class ProcessStores:
    """The per-process stores of a run's parts (its strategy's, its privacy mechanism's) by name: this process's
    checkpoint file holds each one's ``process_state`` under its name."""

    def __init__(self, *owners: HoldsStores | None) -> None:
        self.stores = {name: store for owner in owners if owner is not None for name, store in owner.stores().items()}

    def process_state(self) -> dict[str, Any]:
        return {name: store.process_state() for name, store in self.stores.items()}

    def load_process_states(self, read: Read, saved_world: int, rank: int, world: int) -> None:
        """Restores every store from its part of the files ``saved_world`` processes wrote with ``process_state``."""
        for name, store in self.stores.items():
            store.load_process_states(_part(read, name), saved_world, rank, world)


def _part(read: Read, name: str) -> ReadPart:
    return lambda rank: read(rank)[name]


class ClientStates:
    """Named tensors per client, held on the CPU by default (memory: one vector per client and name).

    With several processes each process holds the clients it trains (client ``i`` trains on process
    ``i % world_size``) and writes them into its own checkpoint file (``lightfed.core.process_states``).
    """

    def __init__(self, device: torch.device | str = "cpu", pin_memory: bool = False) -> None:
        """``pin_memory``: hold the states in page-locked host memory (fast, non-blocking copies to a GPU)."""
        self.device = torch.device(device)
        self.pin_memory = pin_memory
        self._states: State = {}

    def get(self, client_id: int, name: str) -> Tensor | None:
        return self._states.get(client_id, {}).get(name)

    def set(self, client_id: int, name: str, value: Tensor) -> None:
        stored = torch.empty(value.shape, dtype=value.dtype, device=self.device, pin_memory=self.pin_memory)
        self._states.setdefault(client_id, {})[name] = stored.copy_(value.detach())

    def overwrite(self, client_id: int, name: str, value: Tensor) -> None:
        """``set``, but into the stored tensor when it has the value's shape and dtype (no new memory, pinned memory
        stays pinned); only for a caller that holds no earlier ``get`` of it."""
        stored = self.get(client_id, name)
        if stored is None or stored.shape != value.shape or stored.dtype != value.dtype:
            self.set(client_id, name, value)
        else:
            stored.copy_(value.detach(), non_blocking=self.pin_memory)

    def __len__(self) -> int:
        return len(self._states)

    def state_dict(self) -> State:
        return {client_id: dict(state) for client_id, state in self._states.items()}

    def load_state_dict(self, state: State) -> None:
        self._states = {}
        for client_id, values in state.items():
            for name, value in values.items():
                self.set(client_id, name, value)

    def process_state(self) -> Any:
        """What this process writes into its checkpoint file: its clients' states."""
        return self.state_dict()

    def load_process_states(self, read: ReadPart, saved_world: int, rank: int, world: int) -> None:
        """Keeps this process's clients from the files ``saved_world`` processes wrote: only its own file when the
        number of processes is unchanged, every file's clients ``i % world == rank`` otherwise."""
        files = [rank] if saved_world == world else range(saved_world)
        if any(LINKED in read(r) for r in files):
            raise ConfigError("the checkpoint holds its client states on disk; resume with client_states: disk")
        self.load_state_dict({i: s for r in files for i, s in read(r).items() if i % world == rank})


class ShardedVectors:
    """A sharded strategy's own coordinate vectors: ``vectors()`` gives this process's slices (``shard`` of ``size``
    coordinates) by name, saved per process and copied into on a resume, re-sliced for another number of processes."""

    def __init__(self, vectors: Callable[[], dict[str, Tensor]], shard: slice, size: int) -> None:
        self.vectors, self.shard, self.size = vectors, shard, size

    def process_state(self) -> dict[str, Tensor]:
        return self.vectors()

    def load_process_states(self, read: ReadPart, saved_world: int, rank: int, world: int) -> None:
        pieces = CoordinateShards(self.size, saved_world).pieces(self.shard)
        for name, value in self.vectors().items():
            value.copy_(join_pieces(read, pieces, itemgetter(name)))


def join_pieces(read: ReadPart, pieces: list[tuple[int, slice]], pick: Callable[[Any], Tensor]) -> Tensor:
    """One vector slice from the ``pieces`` (process, slice of what it saved) that make it up."""
    return torch.cat([pick(read(rank))[part] for rank, part in pieces])
