"""Per-process checkpoint files: what only one process holds (per-client state, a sharded strategy's slices),
written by each process beside ``last.ckpt`` with no gather, and read back by each process for itself."""

import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import torch

FOLDER = "process_states"

Read = Callable[[int], dict[str, Any]]  # process rank -> what that process wrote


def file_name(rank: int, world: int) -> str:
    return f"process_{rank}_of_{world}.pt"


def write_process_state(folder: Path, rank: int, world: int, state: dict[str, Any]) -> None:
    """Writes this process's ``state`` into ``folder`` atomically (through a temporary file)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name(rank, world)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def reader(folder: Path, world: int) -> Read:
    """Reads process files of ``folder`` on demand, each at most once, memory-mapped: a process that needs a slice of
    another's file pages in only that slice."""

    @cache
    def read(rank: int) -> dict[str, Any]:
        return torch.load(folder / file_name(rank, world), map_location="cpu", weights_only=False, mmap=True)

    return read


def prune(root: Path, keep: set[str]) -> None:
    """Removes the process-state folders under ``root`` that no kept checkpoint refers to."""
    for folder in root.glob("*"):
        if folder.name not in keep:
            shutil.rmtree(folder, ignore_errors=True)


def saved_client_states(checkpoint: Path) -> dict[int, dict[str, torch.Tensor]]:
    """Every client's state saved with the checkpoint file ``checkpoint``, as whole vectors (to inspect a run)."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)["process_states"]
    if saved is None:
        return {}
    read = reader(checkpoint.parent / FOLDER / saved["folder"], saved["world_size"])
    files = [read(rank) for rank in range(saved["world_size"])]
    if "server" not in files[0]:  # each process held whole vectors of its own clients
        return {i: s for file in files for i, s in file["clients"].items()}
    return {  # each process held its slice of every client's vectors
        i: {k: v if v.dim() == 0 else torch.cat([file["clients"][i][k] for file in files]) for k, v in s.items()}
        for i, s in files[0]["clients"].items()
    }
