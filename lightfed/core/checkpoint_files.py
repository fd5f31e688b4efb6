"""Checkpoint files on disk: written durably through a temporary file (a failed write leaves nothing behind), read
without running code (``weights_only``: tensors and plain values only), and the checksums that verify them."""

import errno
import hashlib
import os
import pickle
import re
import warnings
from collections import OrderedDict
from contextlib import suppress
from pathlib import Path
from typing import Any

import torch

from lightfed.core.no_follow import open_new
from lightfed.errors import CheckpointWriteError

CONTAINERS = (dict, OrderedDict, list, tuple, torch.Size)
PLAIN = (int, float, bool, complex, str, bytes, type(None), torch.dtype, torch.device)


class UnreadableFile(Exception):
    """A checkpoint file that cannot be read or verified; the message says why in a few words."""


def write_file(path: Path, state: Any, keep_as: Path | None = None) -> None:
    """Writes ``state`` to ``path`` through ``path.tmp``, on disk (fsync) before it takes ``path``'s name; the file it
    replaces stays as ``keep_as`` (a hard link, no copy). A failed write (a full disk) leaves the files as they were
    and no temporary file, and raises a one-line ``CheckpointWriteError``."""
    tmp = path.with_suffix(".tmp")
    kept = None if keep_as is None else keep_as.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open_new(tmp) as file:  # a link planted as ``path.tmp`` is removed, not written through
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        if kept is not None and keep_as is not None and path.is_file():
            kept.unlink(missing_ok=True)
            os.link(path, kept)
            os.replace(kept, keep_as)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as error:
        for leftover in (tmp, kept):
            if leftover is not None:
                with suppress(OSError):  # a read-only file system refuses this too: the reason is the write's
                    leftover.unlink(missing_ok=True)
        raise write_error(path, error) from None


def write_error(path: Path, error: BaseException, what: str = "checkpoint") -> CheckpointWriteError:
    """The one-line error for a failed write of ``path`` (a ``what``), with the operating system's reason (torch
    reports a full disk as a RuntimeError raised while handling the OSError)."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    if cause is None or cause.strerror is None:
        return CheckpointWriteError(f"cannot write {what} {path}: {_one_line(error)}; resume with --ckpt_path last")
    advice = "free space" if cause.errno in (errno.ENOSPC, errno.EDQUOT) else f"make {path.parent} writable"
    return CheckpointWriteError(
        f"cannot write {what} {path}: {cause.strerror}; {advice} and resume with --ckpt_path last"
    )


def read_file(path: Path, mmap: bool = False) -> Any:
    """What ``path`` holds, loaded with ``weights_only`` (a file that would run code is refused without running it);
    ``UnreadableFile`` when it cannot be read."""
    try:
        with warnings.catch_warnings():  # torch warns about files written by plain pickle
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as error:
        if "Weights only load failed" not in str(error):
            raise UnreadableFile(f"truncated or corrupt: {_one_line(error)}") from None
        imported = re.search(r"GLOBAL (\S+)", str(error))
        what = f"it would call {imported[1]}" if imported else "it holds more than tensors and plain values"
        raise UnreadableFile(f"refused without running it: {what}") from None
    except Exception as error:  # whatever a damaged file makes torch raise: OSError, RuntimeError, KeyError, ...
        raise UnreadableFile(f"truncated or corrupt: {type(error).__name__}: {_one_line(error)}") from None


def _one_line(error: BaseException, limit: int = 200) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def state_checksum(state: Any) -> str:
    """SHA-256 of everything ``state`` holds, in order: keys, numbers, strings, and each tensor's dtype, shape and
    bytes. A value of another type raises TypeError: ``weights_only`` loading would refuse it."""
    digest = hashlib.sha256()
    _feed(digest, state, "checkpoint")
    return digest.hexdigest()


def _feed(digest: Any, value: Any, where: str) -> None:
    kind = type(value)
    if kind in (torch.Tensor, torch.nn.Parameter):
        digest.update(f"{value.dtype} {tuple(value.shape)}:".encode())
        digest.update(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    elif kind in CONTAINERS:
        digest.update(f"{kind.__name__} {len(value)}:".encode())
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(value, dict):
                _feed(digest, key, where)
            _feed(digest, item, f"{where}/{key}")
    elif kind in PLAIN:
        text = repr(value)
        digest.update(f"{kind.__name__} {len(text)}:{text}".encode())
    else:
        raise TypeError(
            f"{where} is a {kind.__module__}.{kind.__qualname__}: a checkpoint holds only tensors, numbers, strings, "
            "None and dicts, lists and tuples of them"
        )


def file_checksum(path: Path) -> str:
    """SHA-256 of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:  # in chunks (hashlib.file_digest needs Python 3.11; lightfed supports 3.10)
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
