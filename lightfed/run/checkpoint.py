"""Checkpoint files: written atomically with the previous one kept, loaded without running code and verified by a
checksum (a damaged ``last.ckpt`` gives way to ``previous.ckpt``), found again by ``--ckpt_path last``."""

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lightfed.core.checkpoint_files import UnreadableFile, read_file, state_checksum, write_file
from lightfed.core.process_states import FOLDER, process_files_problem
from lightfed.errors import ConfigError

LAST = "last.ckpt"
PREVIOUS = "previous.ckpt"
CHECKSUM = "sha256"


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Writes ``state`` and its checksum to ``path`` through a temporary file, so a crash never leaves a broken
    checkpoint; the checkpoint it replaces stays beside it as ``previous.ckpt`` (a hard link, no copy), and ``path``
    always exists. A failed write (a full disk) leaves both as they were and raises ``CheckpointWriteError``."""
    write_file(path, {**state, CHECKSUM: state_checksum(state)}, keep_as=path.with_name(PREVIOUS))


def load_checkpoint(path: Path, warn: Callable[[str], None] = print, process_files: bool = True) -> dict[str, Any]:
    """The checkpoint at ``path``, read with ``weights_only`` and verified by its checksum, and (``process_files``)
    the per-process files it names by theirs; when ``last.ckpt`` cannot be read or verified, the ``previous.ckpt``
    beside it, with a one-line ``warn``ing."""
    if not path.is_file():
        raise ConfigError(f"checkpoint {path} does not exist; check --ckpt_path")
    try:
        return _verified(path, process_files)
    except UnreadableFile as error:
        problem = f"checkpoint {path} cannot be read ({error})"
        previous = path.with_name(PREVIOUS)
        if path.name == LAST and previous.is_file():
            warn(f"lightfed: warning: {problem}; resuming from {previous}, one checkpoint earlier")
            return load_checkpoint(previous, warn, process_files)
        raise ConfigError(f"{problem}; resume from another checkpoint or start without --ckpt_path") from None


def _verified(path: Path, process_files: bool) -> dict[str, Any]:
    state = read_file(path)
    if type(state) is not dict or CHECKSUM not in state:
        raise UnreadableFile("not a lightfed checkpoint: it holds no checksum")
    checksum = state.pop(CHECKSUM)
    try:
        matches = state_checksum(state) == checksum
    except TypeError:
        matches = False
    if not matches:
        raise UnreadableFile("its checksum does not match what it holds: it changed after it was written")
    saved = state.get("process_states")
    problem = process_files_problem(path.parent / FOLDER, saved) if process_files and saved is not None else None
    if problem is not None:
        raise UnreadableFile(problem)
    return state


def resolve_checkpoint(ckpt_path: str | None, run_root: Path, runs: str = "*") -> Path | None:
    """The file to resume from: a path; "last", the newest ``last.ckpt`` of the run folders under ``run_root`` that
    ``runs`` matches (one folder per run version); or "auto", the same when there is one and None (start afresh)
    when there is none. A run folder whose ``last.ckpt`` is gone resumes from its ``previous.ckpt``."""
    if ckpt_path not in ("last", "auto"):
        return None if ckpt_path is None else Path(ckpt_path)
    found = [
        folder / LAST if (folder / LAST).is_file() else folder / PREVIOUS
        for folder in run_root.glob(f"{runs}/checkpoints")
    ]
    candidates = sorted((path for path in found if path.is_file()), key=lambda path: path.stat().st_mtime)
    if not candidates and ckpt_path == "last":
        raise ConfigError(f"--ckpt_path last: no {LAST} under {run_root.resolve()}; start without --ckpt_path")
    return candidates[-1] if candidates else None


def kept_checkpoint(path: Path) -> str:
    """What a failed run left to resume from, in words."""
    return (
        f"the last good checkpoint is kept in {path.parent}"
        if path.is_file()
        else "no checkpoint was written before it"
    )


def rng_states() -> dict[str, Any]:
    """The global RNG states of this process, as tensors and plain values."""
    numpy = np.random.get_state(legacy=False)
    numpy["state"] = {"key": torch.from_numpy(numpy["state"]["key"].astype(np.int64)), "pos": numpy["state"]["pos"]}
    return {"torch": torch.get_rng_state(), "numpy": numpy, "python": random.getstate()}


def restore_rng_states(states: dict[str, Any]) -> None:
    numpy = states["numpy"]
    key = numpy["state"]["key"].numpy().astype(np.uint32)
    np.random.set_state({**numpy, "state": {"key": key, "pos": numpy["state"]["pos"]}})
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
