"""Per-process checkpoint files: what only one process holds (per-client state, a sharded strategy's slices),
written by each process beside ``last.ckpt`` with no gather, and read back by each process for itself."""

import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric

from lightfed.core.checkpoint_files import UnreadableFile, file_checksum, read_file, write_error, write_file
from lightfed.errors import ConfigError

FOLDER = "process_states"
LINKED = "linked_segments"  # a store's entry that names files beside its process file instead of holding tensors

Read = Callable[[int], dict[str, Any]]  # process rank -> what that process wrote


def file_name(rank: int, world: int) -> str:
    return f"process_{rank}_of_{world}.pt"


def write_process_state(folder: Path, rank: int, world: int, state: dict[str, Any]) -> str:
    """Writes this process's ``state`` into ``folder`` atomically (through a temporary file); returns the file's
    checksum, for the checkpoint that names the file."""
    path = folder / file_name(rank, world)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise write_error(folder, error) from None
    written = {key: _linked(value, folder, f"{key}_{rank}_of_{world}") for key, value in state.items()}
    write_file(path, written)
    return file_checksum(path)


def _linked(value: Any, folder: Path, prefix: str) -> Any:
    """What the process file holds of a store's ``process_state``: a store on disk
    (``lightfed.core.disk_client_states``) links its files into ``folder`` and gives their names and checksums."""
    return value.write_segments(folder, prefix) if hasattr(value, "write_segments") else value


def gather_checksums(fabric: Fabric, checksum: str) -> list[str]:
    """Every process's ``checksum`` (a SHA-256 in hex), in rank order; a collective call."""
    mine = torch.tensor(list(bytes.fromhex(checksum)), dtype=torch.uint8, device=fabric.device)
    every = torch.as_tensor(fabric.all_gather(mine)).reshape(fabric.world_size, -1).cpu()
    return [bytes(row.tolist()).hex() for row in every]


def save_process_states(
    fabric: Fabric, root: Path, name: str, state: dict[str, Any], held: bool
) -> dict[str, Any] | None:
    """Writes this process's ``state`` into ``root/name`` when the run ``held`` per-process state (the same on every
    process), and returns what the checkpoint names them by: ``{"folder", "world_size", "sha256"}`` (None when not
    ``held``). The checksums' gather is the only collective: each process has written its file when it returns."""
    if not held:
        return None
    rank, world = fabric.global_rank, fabric.world_size
    checksums = gather_checksums(fabric, write_process_state(root / name, rank, world, state))
    return {"folder": name, "world_size": world, "sha256": checksums}


def load_process_states(stores: Any, root: Path, saved: dict[str, Any] | None, rank: int, world: int) -> str | None:
    """Restores the per-process ``stores`` (``lightfed.core.client_states.ProcessStores``) from the files a checkpoint
    names (``saved``, as ``save_process_states`` returned it; under ``root``) for process ``rank`` of ``world``: only
    its own file when the number of processes is unchanged. Returns their folder's name, None when it names none."""
    if saved is None:
        return None
    read = reader(root / saved["folder"], saved["world_size"])
    stores.load_process_states(read, saved["world_size"], rank, world)
    return saved["folder"]


def process_files_problem(root: Path, saved: dict[str, Any]) -> str | None:
    """What is wrong with the process files a checkpoint names (``saved``: their folder under ``root``, the number
    of processes and the files' checksums), None when each is there with its checksum and loads with
    ``weights_only``."""
    folder, checksums = root / saved["folder"], saved.get("sha256")
    if checksums is None or len(checksums) != saved["world_size"]:
        return "it holds no checksums of its process state files"
    for rank, checksum in enumerate(checksums):
        path = folder / file_name(rank, saved["world_size"])
        if not path.is_file():
            return f"its process state file {path} is missing"
        if file_checksum(path) != checksum:
            return f"its process state file {path} does not match its checksum: it changed after it was written"
        try:
            state = read_file(path, mmap=True)  # only the structure is read: the tensors stay on disk until used
        except UnreadableFile as error:
            return f"its process state file {path}: {error}"
        problem = linked_files_problem(folder, state)
        if problem is not None:
            return problem
    return None


def linked_files_problem(folder: Path, state: Any) -> str | None:
    """What is wrong with the files a process file's stores link (``LINKED`` entries), None when each is there with
    its checksum."""
    for value in state.values() if isinstance(state, dict) else ():
        for entry in value.get(LINKED, []) if isinstance(value, dict) else []:
            for key in ("data", "index"):
                path = folder / entry[key]
                if not path.is_file():
                    return f"its client state file {path} is missing"
                if file_checksum(path) != entry["sha256" if key == "data" else "index_sha256"]:
                    return f"its client state file {path} does not match its checksum: it changed after it was written"
    return None


def reader(folder: Path, world: int) -> Read:
    """Reads process files of ``folder`` on demand, each at most once, memory-mapped (a process that needs a slice of
    another's file pages in only that slice) and with ``weights_only``: one that cannot be read is a ``ConfigError``."""

    @cache
    def read(rank: int) -> dict[str, Any]:
        path = folder / file_name(rank, world)
        try:
            state = read_file(path, mmap=True)
        except UnreadableFile as error:
            raise ConfigError(
                f"process state file {path} cannot be read ({error}); resume from another checkpoint or start without "
                "--ckpt_path"
            ) from None
        linked = (key for key, value in state.items() if isinstance(value, dict) and LINKED in value)
        return {**state, **{key: {**state[key], "folder": str(folder)} for key in linked}}  # where its files are

    return read


def prune(root: Path, keep: set[str | None]) -> None:
    """Removes the process-state folders under ``root`` that no kept checkpoint refers to."""
    for folder in root.glob("*"):
        if folder.name not in keep:
            shutil.rmtree(folder, ignore_errors=True)
