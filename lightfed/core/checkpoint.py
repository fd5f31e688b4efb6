"""Checkpoint files: written atomically with the previous one kept, found again by ``--ckpt_path last``."""

import os
import pickle
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lightfed.errors import ConfigError

LAST = "last.ckpt"
PREVIOUS = "previous.ckpt"


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Writes ``state`` to ``path`` through a temporary file, so a crash never leaves a broken checkpoint; the
    checkpoint it replaces stays beside it as ``previous.ckpt`` (a hard link, no copy), and ``path`` always exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    if path.is_file():
        kept = path.with_name(PREVIOUS + ".tmp")
        kept.unlink(missing_ok=True)
        os.link(path, kept)
        os.replace(kept, path.with_name(PREVIOUS))
    os.replace(tmp, path)


def load_checkpoint(path: Path, warn: Callable[[str], None] = print) -> dict[str, Any]:
    """The checkpoint at ``path``; when ``last.ckpt`` cannot be read (truncated or corrupt on disk), the
    ``previous.ckpt`` beside it, with a one-line ``warn``ing."""
    if not path.is_file():
        raise ConfigError(f"checkpoint {path} does not exist; check --ckpt_path")
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as error:
        problem = f"checkpoint {path} cannot be read (truncated or corrupt: {' '.join(str(error).split())})"
        previous = path.with_name(PREVIOUS)
        if path.name == LAST and previous.is_file():
            warn(f"lightfed: warning: {problem}; resuming from {previous}, one checkpoint earlier")
            return load_checkpoint(previous, warn)
        raise ConfigError(f"{problem}; resume from another checkpoint or start without --ckpt_path") from None


def resolve_checkpoint(ckpt_path: str | None, run_root: Path) -> Path | None:
    """The file to resume from: a path; "last", the newest ``last.ckpt`` under ``run_root`` (one folder per run
    version); or "auto", the same when there is one and None (start afresh) when there is none."""
    if ckpt_path not in ("last", "auto"):
        return None if ckpt_path is None else Path(ckpt_path)
    candidates = sorted(run_root.glob(f"*/checkpoints/{LAST}"), key=lambda p: p.stat().st_mtime)
    if not candidates and ckpt_path == "last":
        raise ConfigError(f"--ckpt_path last: no {LAST} under {run_root.resolve()}; start without --ckpt_path")
    return candidates[-1] if candidates else None


def rng_states() -> dict[str, Any]:
    """The global RNG states of this process."""
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def restore_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
