"""A sharded strategy's per-client state: every process holds its slice of each client's vectors in memory, and a
checkpoint writes only what changed since the last one."""

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lightfed.core.client_states import ClientStates, ReadPart, State, join_pieces
from lightfed.core.disk_client_states import DiskClientStates, linked_state
from lightfed.core.process_states import LINKED
from lightfed.core.sharding import CoordinateShards


class ShardedClientStates(ClientStates):
    """Per-client state of a sharded strategy: every process holds its slice ``shard`` of each client's vectors of
    ``size`` coordinates (memory per process falls as 1 / world size); 0-d tensors are the same on every process.

    A checkpoint appends the tensors set since the last one to a log of segment files (``DiskClientStates``'s, in a
    temporary folder) and links the segments that hold a live tensor beside the process file (``write_segments``):
    it writes the clients trained since the last checkpoint, not the population (FedECADO's currents: 759 MB for 20
    VGG-11 clients).
    """

    def __init__(self, shard: slice, size: int, device: torch.device | str = "cpu", pin_memory: bool = False) -> None:
        super().__init__(device, pin_memory)
        self.shard, self.size = shard, size
        self._log: DiskClientStates | None = None
        self._changed: set[tuple[int, str]] = set()

    def set(self, client_id: int, name: str, value: Tensor) -> None:
        super().set(client_id, name, value)
        self._changed.add((client_id, name))

    def overwrite(self, client_id: int, name: str, value: Tensor) -> None:
        super().overwrite(client_id, name, value)
        self._changed.add((client_id, name))

    def process_state(self) -> "ShardedClientStates":
        """Itself: ``lightfed.core.process_states`` has it ``write_segments`` beside the process file."""
        return self

    def write_segments(self, folder: Path, prefix: str) -> dict[str, Any]:
        """Appends the tensors set since the last checkpoint to the log and links its live segments into ``folder``;
        returns their names and checksums (``DiskClientStates.write_segments``)."""
        if self._log is None:
            self._log = DiskClientStates()
        for client_id, name in sorted(self._changed):
            self._log.set(client_id, name, self._states[client_id][name])
        self._changed.clear()
        return self._log.write_segments(folder, prefix)

    def load_process_states(self, read: ReadPart, saved_world: int, rank: int, world: int) -> None:
        """This process's slice of every client's vectors, joined from the files whose slices overlap it (only its
        own file when the number of processes is unchanged), whether they hold the tensors or link segments. With the
        same number of processes the log goes on from the checkpoint's segments: nothing is written again."""
        self._log = None
        if saved_world == world and LINKED in read(rank):  # its own file: whole slices, from the log it goes on with
            self._log = DiskClientStates()
            self._log.load_process_states(lambda _: read(rank), saved_world=1, rank=0, world=1)
            self.load_state_dict(self._log.state_dict())
            self._changed.clear()
            return
        pieces = CoordinateShards(self.size, saved_world).pieces(self.shard)
        tensors = cache(lambda saved_rank: linked_state(read(saved_rank)))
        first = tensors(pieces[0][0])
        self.load_state_dict(
            {
                i: {k: v if v.dim() == 0 else join_pieces(tensors, pieces, _state_of(i, k)) for k, v in s.items()}
                for i, s in first.items()
            }
        )


def _state_of(client_id: int, name: str) -> Callable[[State], Tensor]:
    return lambda saved: saved[client_id][name]
