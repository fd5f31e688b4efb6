"""The disk store of per-client state: the same values as the in-memory store, checkpoints that write only the
clients that changed (the rest are links to files already written) and share no file with the checkpoint before,
verified by checksums, resumable on any number of processes, and a state larger than the process's memory limit."""

import errno
import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import lightfed.core.disk_client_states as disk
from lightfed.core.client_states import ClientStates
from lightfed.core.disk_client_states import DiskClientStates
from lightfed.core.process_states import process_files_problem, prune, reader, write_process_state
from lightfed.errors import CheckpointWriteError, ConfigError

VALUES = {
    "c": torch.arange(6.0).reshape(2, 3),
    "history": torch.tensor([0.5, 0.25], dtype=torch.float64),
    "round": torch.tensor(7),
    "empty": torch.empty(0),
    "mask": torch.tensor([True, False]),
}


def _store(folder: Path, clients, world: int = 1, rank: int = 0) -> DiskClientStates:
    states = DiskClientStates(folder / "work")
    for client_id in clients:
        if client_id % world == rank:
            states.set(client_id, "c", torch.full((4,), float(client_id)))
    return states


def _checkpoint(root: Path, name: str, stores: list[DiskClientStates]) -> Path:
    """What the trainer does at a checkpoint: each process writes its file into ``root/name``; older folders but
    the previous one go."""
    for rank, store in enumerate(stores):
        write_process_state(root / name, rank, len(stores), {"clients": store.process_state()})
    kept = sorted(root.iterdir(), key=lambda path: path.stat().st_mtime)[-2:]
    prune(root, {path.name for path in kept})
    return root / name


def test_it_gives_back_what_the_in_memory_store_gives_back(tmp_path):
    on_disk, in_memory = DiskClientStates(tmp_path), ClientStates()
    for store in (on_disk, in_memory):
        for name, value in VALUES.items():
            store.set(3, name, value)
        store.overwrite(3, "c", VALUES["c"] * 2)  # the latest value wins
    for name in VALUES:
        assert torch.equal(on_disk.get(3, name), in_memory.get(3, name))
        assert on_disk.get(3, name).dtype == in_memory.get(3, name).dtype
    assert on_disk.get(3, "missing") is None and on_disk.get(4, "c") is None
    assert len(on_disk) == 1 and on_disk.state_dict().keys() == {3}


def test_a_checkpoint_writes_only_the_clients_trained_before_the_last_one_and_shares_no_file_with_it(tmp_path):
    store = _store(tmp_path, range(100))
    _checkpoint(tmp_path / "states", "round_1", [store])
    for client_id in (3, 50):  # two clients train again
        store.set(client_id, "c", torch.full((4,), -1.0))
    second = _checkpoint(tmp_path / "states", "round_2", [store])
    store.set(7, "c", torch.full((4,), -2.0))
    before = {_inode(path) for path in tmp_path.rglob("*") if path.is_file()}
    third = _checkpoint(tmp_path / "states", "round_3", [store])
    written = [path for path in third.glob("*.bin") if _inode(path) not in before]
    assert [path.stat().st_size for path in written] == [2 * 4 * 4]  # a copy of round 2's 2 clients x 4 float32
    assert len(list(third.glob("*.bin"))) == 3  # the 100 clients' first values (a link), round 2's, client 7's
    assert not {_inode(path) for path in second.iterdir()} & {_inode(path) for path in third.iterdir()}
    resumed = DiskClientStates(tmp_path / "other")
    resumed.load_process_states(lambda rank: reader(third, 1)(rank)["clients"], 1, 0, 1)
    assert torch.equal(resumed.get(50, "c"), torch.full((4,), -1.0))
    assert torch.equal(resumed.get(7, "c"), torch.full((4,), -2.0))
    assert torch.equal(resumed.get(51, "c"), torch.full((4,), 51.0))


def _inode(path: Path) -> tuple[int, int]:
    return path.stat().st_dev, path.stat().st_ino


def test_it_reads_on_after_the_checkpoints_its_files_came_from_are_pruned(tmp_path):
    store = _store(tmp_path, range(10))
    _checkpoint(tmp_path / "states", "round_1", [store])
    store.set(1, "c", torch.zeros(4))
    _checkpoint(tmp_path / "states", "round_2", [store])
    _checkpoint(tmp_path / "states", "round_3", [store])  # round_1 is pruned
    assert not (tmp_path / "states" / "round_1").exists()
    assert torch.equal(store.get(9, "c"), torch.full((4,), 9.0)) and torch.equal(store.get(1, "c"), torch.zeros(4))
    assert not list((tmp_path / "work").glob("*/*.bin"))  # its sealed files live in the newest checkpoint only


@pytest.mark.parametrize("world", [1, 3])
def test_it_resumes_on_another_number_of_processes(tmp_path, world):
    saved = _checkpoint(tmp_path / "states", "round_1", [_store(tmp_path, range(11), 2, rank) for rank in range(2)])
    for rank in range(world):
        loaded = DiskClientStates(tmp_path / "other")
        loaded.load_process_states(lambda r: reader(saved, 2)(r)["clients"], 2, rank, world)
        assert loaded.state_dict().keys() == set(range(rank, 11, world))
        assert all(torch.equal(loaded.get(i, "c"), torch.full((4,), float(i))) for i in range(rank, 11, world))


def test_a_changed_file_fails_its_checksum(tmp_path):
    saved = _checkpoint(tmp_path / "states", "round_1", [_store(tmp_path, range(5))])
    files = {"folder": saved.name, "world_size": 1, "sha256": [_sha(saved / "process_0_of_1.pt")]}
    assert process_files_problem(saved.parent, files) is None
    segment = next(saved.glob("*.bin"))
    segment.write_bytes(segment.read_bytes()[:-4] + b"\0\0\0\0")
    assert "does not match its checksum" in process_files_problem(saved.parent, files)
    segment.unlink()
    assert "is missing" in process_files_problem(saved.parent, files)


def test_the_in_memory_store_refuses_a_checkpoint_on_disk_in_one_line(tmp_path):
    saved = _checkpoint(tmp_path / "states", "round_1", [_store(tmp_path, range(5))])
    with pytest.raises(ConfigError, match="client_states: disk"):
        ClientStates().load_process_states(lambda r: reader(saved, 1)(r)["clients"], 1, 0, 1)


def test_many_segments_are_compacted_into_one(tmp_path, monkeypatch):
    monkeypatch.setattr(disk, "MAX_SEGMENTS", 2)
    store = _store(tmp_path, range(6))
    for round in range(1, 5):
        store.set(round, "c", torch.full((4,), 100.0 + round))
        saved = _checkpoint(tmp_path / "states", f"round_{round}", [store])
    assert len(list(saved.glob("*.bin"))) <= 3
    expected = {i: 100.0 + i if 1 <= i <= 4 else float(i) for i in range(6)}
    assert all(torch.equal(store.get(i, "c"), torch.full((4,), value)) for i, value in expected.items())


def _sha(path: Path) -> str:
    from lightfed.core.checkpoint_files import file_checksum

    return file_checksum(path)


@pytest.mark.slow
def test_a_state_larger_than_the_memory_limit_works(tmp_path):
    """128 MB of client state under an address-space limit of 64 MB above what the process has mapped."""
    script = textwrap.dedent(
        f"""
        import resource
        from pathlib import Path

        import torch
        from lightfed.core.disk_client_states import DiskClientStates
        from lightfed.core.process_states import reader, write_process_state

        def mapped():
            return int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()

        resource.setrlimit(resource.RLIMIT_AS, (mapped() + (64 << 20), resource.RLIM_INFINITY))
        try:
            torch.empty(32 << 20)  # 128 MB: more than the limit leaves
            raise SystemExit("the limit does not hold")
        except RuntimeError:
            pass
        store = DiskClientStates({str(tmp_path)!r})
        for client in range(32):
            store.set(client, "c", torch.full((1 << 20,), float(client)))  # 4 MB each
        write_process_state(Path({str(tmp_path / "round_1")!r}), 0, 1, {{"clients": store.process_state()}})
        loaded = DiskClientStates({str(tmp_path)!r})
        loaded.load_process_states(lambda r: reader(Path({str(tmp_path / "round_1")!r}), 1)(r)["clients"], 1, 0, 1)
        assert all(loaded.get(client, "c")[-1] == client for client in range(32))
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.stdout.strip() == "ok", result.stderr[-2000:]


def test_a_copy_cut_short_by_a_kill_is_replaced_when_the_round_is_checkpointed_again(tmp_path, monkeypatch):
    def cross_device(source, target):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(disk.os, "link", cross_device)  # the work folder on another file system: a copy
    killed = _checkpoint(tmp_path / "states", "round_1", [_store(tmp_path / "killed", range(4))])
    for path in killed.glob("*.bin"):  # the kill came half-way through the copy
        path.write_bytes(path.read_bytes()[:5])
    _checkpoint(tmp_path / "states", "round_1", [_store(tmp_path / "resumed", range(4))])  # the round again
    resumed = DiskClientStates(tmp_path / "other")
    resumed.load_process_states(lambda rank: reader(killed, 1)(rank)["clients"], 1, 0, 1)
    assert [resumed.get(client_id, "c").tolist() for client_id in range(4)] == [[float(i)] * 4 for i in range(4)]
    assert not [path for path in killed.iterdir() if path.name.startswith(".")]  # no temporary copy left


class _FullDisk:
    """A file whose writes stop with ENOSPC once ``room`` bytes of them are written."""

    def __init__(self, file, room: list[int]) -> None:
        self.file, self.room = file, room

    def write(self, data) -> int:
        fits = min(len(data), self.room[0])
        self.file.write(bytes(data)[:fits])
        self.room[0] -= fits
        if fits < len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return fits

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def _disk_full_after(monkeypatch, room: int) -> None:
    """The disk store's files fill the disk after ``room`` more bytes."""
    left = [room]

    def opened(path, mode="r", *args, **kwargs):
        file = open(path, mode, *args, **kwargs)
        return _FullDisk(file, left) if "w" in mode or "a" in mode else file

    monkeypatch.setattr(disk, "open", opened, raising=False)


def test_a_full_disk_while_a_client_state_is_written_is_one_line_and_leaves_nothing_behind(tmp_path, monkeypatch):
    store = _store(tmp_path, range(3))
    _disk_full_after(monkeypatch, 8)  # half of the next client's 16 bytes
    with pytest.raises(
        CheckpointWriteError,
        match=r"^cannot write client state file \S+segment_0.bin: No space left "
        "on device; free space and resume with --ckpt_path last$",
    ):
        store.set(3, "c", torch.zeros(4))
    assert store.folder.joinpath("segment_0.bin").stat().st_size == 3 * 16  # cut back to the clients it holds
    monkeypatch.undo()
    assert store.get(3, "c") is None and torch.equal(store.get(2, "c"), torch.full((4,), 2.0))
    folder = store.folder
    del store
    gc.collect()
    assert not folder.exists()


def test_a_full_disk_while_a_checkpoint_copies_a_segment_is_one_line_and_leaves_no_partial_file(tmp_path, monkeypatch):
    def cross_device(source, target):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    store = _store(tmp_path, range(3))
    monkeypatch.setattr(disk.os, "link", cross_device)  # the work folder on another file system: a copy
    _disk_full_after(monkeypatch, 8)
    with pytest.raises(
        CheckpointWriteError,
        match=r"^cannot write client state file \S+\.bin: No space left on "
        "device; free space and resume with --ckpt_path last$",
    ):
        _checkpoint(tmp_path / "states", "round_1", [store])
    assert not [path for path in (tmp_path / "states").rglob("*") if path.name.startswith(".")]


def test_the_folder_of_a_store_whose_process_died_is_removed_by_the_next_store(tmp_path):
    script = "import os, sys; from lightfed.core.disk_client_states import DiskClientStates as D; s = D(sys.argv[1]); os._exit(0)"
    subprocess.run([sys.executable, "-c", script, tmp_path], check=True, timeout=300)  # os._exit: as a kill does
    (abandoned,) = tmp_path.glob("client-states-*")
    alive = DiskClientStates(tmp_path)
    assert not abandoned.exists() and alive.folder.exists()
    DiskClientStates(tmp_path)  # a live store's folder stays
    assert alive.folder.exists()
