"""A folder in use by a process: an exclusive ``flock`` on its ``.lock`` file, which ends with the process however it
ends (a kill included), so a folder is never left locked. A symbolic link in place of the lock file is never followed."""

import fcntl
import os
import shutil
from contextlib import suppress
from pathlib import Path
from typing import IO

from lightfed.core.no_follow import open_new, open_no_follow

LOCK = ".lock"


class FolderLock:
    """Holds ``folder``'s lock from ``acquire`` to ``release`` (or the process's end); ``holder`` names the process
    that holds it when ``acquire`` fails."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK
        self._file: IO[str] | None = None
        self.holder = ""

    def acquire(self) -> bool:
        """Takes the lock; False when another open of the lock file holds it (another process, or this one). A lock
        file made here appears already held (``_created_held``): ``remove_abandoned`` never sees it free."""
        if self._created_held():
            return True
        file = open_no_follow(self.path, "a+")  # a link in its place is refused (OSError), never truncated
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            self.holder = file.read().strip()
            file.close()
            return False
        file.truncate(0)
        file.write(f"{os.getpid()}\n")
        file.flush()
        self._file = file
        return True

    def _created_held(self) -> bool:
        """Makes the lock file under another name, locks it, then links it into place; False when one exists (or
        cannot be linked)."""
        if self.path.exists():
            return False
        made = self.path.with_name(f"{LOCK}.{os.getpid()}.new")
        file = open_new(made, "w+")
        fcntl.flock(file, fcntl.LOCK_EX)  # a new file: no one else has it open
        file.write(f"{os.getpid()}\n")
        file.flush()
        try:
            os.link(made, self.path)  # fails when another process made the lock file meanwhile
        except OSError:  # that, or a file system without hard links: the lock file is opened in place
            file.close()
            return False
        finally:
            made.unlink()
        self._file = file
        return True

    @property
    def held_by_this_process(self) -> bool:
        """Whether the process that holds the lock (when ``acquire`` failed) is this one."""
        return self.holder == str(os.getpid())

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def remove_abandoned(root: Path, pattern: str) -> None:
    """Removes the folders under ``root`` matching ``pattern`` whose lock no process holds (their process died);
    a folder without a lock file (one being made) stays."""
    for folder in root.glob(pattern):
        lock = FolderLock(folder)
        with suppress(OSError):
            if lock.path.is_file() and lock.acquire():
                shutil.rmtree(folder, ignore_errors=True)
                lock.release()
