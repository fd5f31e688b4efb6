"""Opening a run's files without following a symbolic link in their place: a link planted in a shared folder would
otherwise make the run truncate or overwrite the file it points to."""

import os
from contextlib import suppress
from pathlib import Path
from typing import IO, Any


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)


def open_no_follow(path: Path, mode: str) -> IO[Any]:
    """``open(path, mode)``, but a symbolic link at ``path`` is refused (``OSError``, ELOOP) instead of followed."""
    return open(path, mode, opener=_no_follow)  # noqa: SIM115 (the caller's)


def open_new(path: Path, mode: str = "wb") -> IO[Any]:
    """A new file at ``path`` (a temporary one) opened for writing (``mode`` "w", "wb", "w+", ...): whatever has the name
    is removed first (a link itself, never what it points to) and the file is created exclusively, so a link made in
    between is refused (``FileExistsError``), not followed."""
    with suppress(FileNotFoundError):
        os.unlink(path)
    return open(path, mode.replace("w", "x"))  # noqa: SIM115 (the caller's)
