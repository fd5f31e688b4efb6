"""Every client's state a checkpoint holds, whichever store wrote it (to inspect a run)."""

from pathlib import Path

import torch

from lightfed.core.disk_client_states import DiskClientStates, linked_state
from lightfed.core.process_states import FOLDER, LINKED, process_files_problem, reader
from lightfed.errors import ConfigError


def saved_client_states(checkpoint: Path) -> dict[int, dict[str, torch.Tensor]]:
    """Every client's state saved with the checkpoint file ``checkpoint``, as whole vectors (to inspect a run)."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)["process_states"]
    if saved is None:
        return {}
    problem = process_files_problem(checkpoint.parent / FOLDER, saved)
    if problem is not None:
        raise ConfigError(f"checkpoint {checkpoint}: {problem}")
    read = reader(checkpoint.parent / FOLDER / saved["folder"], saved["world_size"])
    files = [read(rank) for rank in range(saved["world_size"])]
    if "server" not in files[0]:  # each process held whole vectors of its own clients
        if LINKED not in files[0]["clients"]:
            return {i: s for file in files for i, s in file["clients"].items()}
        store = DiskClientStates()  # on disk
        store.load_process_states(lambda rank: read(rank)["clients"], saved["world_size"], rank=0, world=1)
        return store.state_dict()
    slices = [linked_state(file["clients"]) for file in files]  # each process held its slice of every client's vectors
    return {
        i: {k: v if v.dim() == 0 else torch.cat([held[i][k] for held in slices]) for k, v in s.items()}
        for i, s in slices[0].items()
    }
