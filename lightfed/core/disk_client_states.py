"""Per-client state on disk: an append-only log of segment files per process, read for the clients of a round and
written only for the clients that changed; a checkpoint links the segments and names them with their checksums, so its
cost follows the clients trained since the last one, not the population. Each segment has two files, so that the two
newest checkpoints never share one: damage to a file costs one checkpoint, not both."""

import hashlib
import os
import shutil
import tempfile
import threading
import weakref
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor

from lightfed.core.checkpoint_files import file_checksum, read_file, write_error, write_file
from lightfed.core.client_states import ClientStates, ReadPart, State
from lightfed.core.folder_lock import FolderLock, remove_abandoned
from lightfed.core.process_states import LINKED
from lightfed.errors import ConfigError

MAX_SEGMENTS = 32  # more live segments than this: the next checkpoint first copies the live records into a new one
FOLDER_PREFIX = "client-states-"  # a store's own folder under ``client_states_folder``


class Record(NamedTuple):
    """Where one client's named tensor lies: in segment ``segment`` at byte ``offset``."""

    segment: int
    offset: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return torch.Size(self.shape).numel() * _dtype(self.dtype).itemsize


@dataclass
class Segment:
    """One file of the log: appended to while it is the journal, never changed once a checkpoint has sealed it."""

    path: Path
    records: dict[int, dict[str, tuple[int, str, tuple[int, ...]]]] = field(default_factory=dict)
    digest: Any = field(default_factory=hashlib.sha256)
    size: int = 0
    sha256: str | None = None  # set when sealed
    index_path: Path | None = None  # its records, written when sealed
    index_sha256: str | None = None
    spares: tuple[Path, Path] | None = None  # its files (data, index) in the checkpoint before the newest: other inodes


class DiskClientStates(ClientStates):
    """Named tensors per client in an append-only log of files under ``folder`` (a new temporary folder when None;
    put it on the file system of the run folder, so that a checkpoint links its files instead of copying them).

    ``get`` reads one tensor from its file (memory: only the tensors in use), ``set`` appends one; a checkpoint seals
    the file written since the last one and links every file that still holds a live tensor beside the process file,
    with its SHA-256. Resumable on any number of processes, like ``ClientStates``.

    The store's folder is locked while the process lives; a new store removes the folders of stores whose process
    died (a kill leaves nothing behind for long).
    """

    def __init__(self, folder: str | Path | None = None) -> None:
        super().__init__()
        root = Path(tempfile.gettempdir() if folder is None else folder)
        root.mkdir(parents=True, exist_ok=True)
        remove_abandoned(root, f"{FOLDER_PREFIX}*")
        self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=root))
        lock = FolderLock(self.folder)
        lock.acquire()
        weakref.finalize(self, _remove, self.folder, lock)  # linked checkpoint files stay
        self._where: dict[int, dict[str, Record]] = {}
        self._segments: dict[int, Segment] = {}
        self._journal: int | None = None  # the segment that ``set`` appends to
        self._next = 0
        self._appending = threading.Lock()

    def get(self, client_id: int, name: str) -> Tensor | None:
        record = self._where.get(client_id, {}).get(name)
        if record is None:
            return None
        with open(self._segments[record.segment].path, "rb") as file:
            data = os.pread(file.fileno(), record.nbytes, record.offset)
        if len(data) != record.nbytes:
            raise ConfigError(
                f"client state file {self._segments[record.segment].path} is truncated; resume from a checkpoint"
            )
        value = (
            torch.frombuffer(bytearray(data), dtype=_dtype(record.dtype))
            if data
            else torch.empty(0, dtype=_dtype(record.dtype))
        )
        return value.reshape(record.shape)

    def set(self, client_id: int, name: str, value: Tensor) -> None:
        data = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().data  # a view, no copy
        with self._appending:  # one append at a time: each takes the journal's end as its offset
            self._append(client_id, name, value, data)

    def _append(self, client_id: int, name: str, value: Tensor, data: memoryview) -> None:
        if self._journal is None:
            self._journal = self._new_segment(self.folder / f"segment_{self._next}.bin")
        segment = self._segments[self._journal]
        try:
            with open(segment.path, "ab") as file:
                file.write(data)
        except OSError as error:  # a full disk: the journal is cut back to its records
            with suppress(OSError):
                os.truncate(segment.path, segment.size)
            raise write_error(segment.path, error, "client state file") from None
        record = Record(self._journal, segment.size, str(value.dtype).removeprefix("torch."), tuple(value.shape))
        segment.digest.update(data)
        segment.size += len(data)
        segment.records.setdefault(client_id, {})[name] = record[1:]
        self._where.setdefault(client_id, {})[name] = record

    def overwrite(self, client_id: int, name: str, value: Tensor) -> None:
        self.set(client_id, name, value)

    def __len__(self) -> int:
        return len(self._where)

    def state_dict(self) -> State:
        """Every client's tensors, read into memory (to inspect a small run)."""
        return {i: {name: self._read(i, name) for name in names} for i, names in self._where.items()}

    def load_state_dict(self, state: State) -> None:
        self._forget()
        for client_id, values in state.items():
            for name, value in values.items():
                self.set(client_id, name, value)

    def process_state(self) -> "DiskClientStates":
        """Itself: ``lightfed.core.process_states`` has it ``write_segments`` beside the process file."""
        return self

    def __bool__(self) -> bool:
        return bool(self._where)

    def write_segments(self, folder: Path, prefix: str) -> dict[str, Any]:
        """Seals the journal and puts every segment that holds a live tensor into ``folder``; returns what the process
        file holds in their place: their names and checksums, in log order.

        A new segment's files are linked (copied across file systems); an older one's are not those of the newest
        checkpoint, whose folder becomes the previous one's: a link of its files in the checkpoint before (other
        inodes), or a verified copy where there is none (its first checkpoint after the one that sealed it, or after
        a resume). A file of that name already in ``folder`` is kept only when its checksum verifies."""
        if len(self._live()) > MAX_SEGMENTS:
            self._compact()
        if self._journal is not None:
            self._seal(self._journal)
            self._journal = None
        live = self._live()
        for number in list(self._segments):
            if number not in live:  # every tensor it holds was written again later
                self._drop(number)
        linked = []
        for number in sorted(live):
            segment = self._segments[number]
            assert segment.index_path is not None and segment.sha256 is not None and segment.index_sha256 is not None
            name = f"{prefix}_{segment.sha256[:16]}_{segment.index_sha256[:16]}"  # by content: one meaning per name
            files = (segment.path, segment.index_path)
            targets = (folder / f"{name}.bin", folder / f"{name}.index.pt")
            if targets[0] != files[0]:  # (the same checkpoint written again: its files are in place)
                own = files[0].parent == self.folder
                spares, checksums = segment.spares or (None, None), (segment.sha256, segment.index_sha256)
                for file, target, spare, sha256 in zip(files, targets, spares, checksums, strict=True):
                    _place(target, sha256, link=file if own else spare, copy=file, avoid=None if own else file)
                    if own:  # the checkpoint's name keeps it
                        file.unlink()
                segment.spares = None if own else files
                segment.path, segment.index_path = targets  # the newest checkpoint's names outlive older ones'
            linked.append(
                {
                    "data": targets[0].name,
                    "index": targets[1].name,
                    "sha256": segment.sha256,
                    "index_sha256": segment.index_sha256,
                }
            )
        return {LINKED: linked}

    def load_process_states(self, read: ReadPart, saved_world: int, rank: int, world: int) -> None:
        """This process's clients (``i % world == rank``) from the segments the process files name (only its own
        file when the number of processes is unchanged); reads the indices, not the tensors."""
        self._forget()
        for saved_rank in [rank] if saved_world == world else range(saved_world):
            saved = read(saved_rank)
            if LINKED not in saved:
                raise ConfigError(
                    "the checkpoint holds client states in memory form; resume with client_states: memory"
                )
            for entry in saved[LINKED]:
                number = self._new_segment(Path(saved["folder"]) / entry["data"])
                segment = self._segments[number]
                segment.sha256, segment.index_sha256 = entry["sha256"], entry["index_sha256"]
                segment.index_path = Path(saved["folder"]) / entry["index"]
                segment.records = read_file(segment.index_path)
                for client_id, records in segment.records.items():
                    if client_id % world == rank:
                        where = self._where.setdefault(client_id, {})
                        where.update({name: Record(number, *record) for name, record in records.items()})
        for number in set(self._segments) - self._live():
            self._drop(number)

    def _read(self, client_id: int, name: str) -> Tensor:
        value = self.get(client_id, name)
        assert value is not None
        return value

    def _new_segment(self, path: Path) -> int:
        number, self._next = self._next, self._next + 1
        self._segments[number] = Segment(path)
        return number

    def _live(self) -> frozenset[int]:
        return frozenset(record.segment for records in self._where.values() for record in records.values())

    def _seal(self, number: int) -> None:
        """Makes the journal durable and immutable, with its index file and checksum."""
        segment = self._segments[number]
        with open(segment.path, "ab") as file:
            os.fsync(file.fileno())
        segment.sha256 = segment.digest.hexdigest()
        segment.index_path = segment.path.with_suffix(".index.pt")
        write_file(segment.index_path, segment.records)
        segment.index_sha256 = file_checksum(segment.index_path)

    def _compact(self) -> None:
        """Appends every live tensor outside the journal to it: the older segments then hold no live tensor."""
        for client_id, records in list(self._where.items()):
            for name, record in list(records.items()):
                if record.segment != self._journal:
                    self.set(client_id, name, self._read(client_id, name))

    def _drop(self, number: int) -> None:
        """Forgets a segment; its file is removed when it is this store's own (a checkpoint's link stays)."""
        segment = self._segments.pop(number)
        for path in (segment.path, segment.index_path):
            if path is not None and path.parent == self.folder:
                path.unlink(missing_ok=True)

    def _forget(self) -> None:
        for number in list(self._segments):
            self._drop(number)
        self._where, self._journal = {}, None


def linked_state(saved: Any) -> State:
    """The tensors of what a store wrote into a process file: ``saved`` itself, or the tensors of the segments it links
    (``write_segments``; ``saved["folder"]`` says where they are), read into memory."""
    if not (isinstance(saved, dict) and LINKED in saved):
        return saved
    store = DiskClientStates()
    store.load_process_states(lambda _: saved, saved_world=1, rank=0, world=1)
    return store.state_dict()


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype)
    return dtype


def _remove(folder: Path, lock: FolderLock) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    lock.release()


def _place(target: Path, sha256: str, link: Path | None, copy: Path, avoid: Path | None) -> None:
    """Makes ``target`` a file of checksum ``sha256``: another name of ``link`` (a hard link), or else a copy of
    ``copy`` verified as it is read. A file already named ``target`` stays when it verifies and is not ``avoid``
    (a file it must not share an inode with): one left by a kill, or by a checkpoint that was given up. The name
    appears only once the file is complete (through a temporary name in the same folder); a failed write (a full
    disk) leaves no temporary file and raises a one-line ``CheckpointWriteError``."""
    if target.is_file() and not (avoid is not None and avoid.is_file() and target.samefile(avoid)):
        if file_checksum(target) == sha256:
            return
    partial = target.with_name(f".{target.name}.partial")
    try:
        partial.unlink(missing_ok=True)
        if link is None or not _linked(link, partial):
            _copy_verified(copy, partial, sha256)
        os.replace(partial, target)
    except OSError as error:
        with suppress(OSError):
            partial.unlink(missing_ok=True)
        raise write_error(target, error, "client state file") from None


def _linked(source: Path, target: Path) -> bool:
    """Whether ``target`` became another name of ``source`` (not across file systems, nor where links are refused)."""
    try:
        os.link(source, target)
    except OSError:
        return False
    return True


def _copy_verified(source: Path, target: Path, sha256: str) -> None:
    """Copies ``source`` to ``target`` durably; a ``source`` that no longer has checksum ``sha256`` is a
    ``ConfigError`` (it changed after it was written)."""
    digest = hashlib.sha256()
    with open(source, "rb") as reading, open(target, "wb") as writing:
        for chunk in iter(lambda: reading.read(1 << 20), b""):
            digest.update(chunk)
            writing.write(chunk)
        writing.flush()
        os.fsync(writing.fileno())
    if digest.hexdigest() != sha256:
        target.unlink()
        raise ConfigError(
            f"client state file {source} does not match its checksum: it changed after it was written; resume with "
            "--ckpt_path last (a damaged checkpoint gives way to the one before)"
        )
