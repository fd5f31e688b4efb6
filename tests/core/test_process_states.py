"""Per-process checkpoint files: each process writes what it holds and reads back only its own file, or re-slices
what another number of processes wrote."""

import shutil

import torch

from lightfed.core.client_states import ClientStates, ProcessStores, ShardedVectors
from lightfed.core.process_states import reader, write_process_state
from lightfed.core.saved_client_states import saved_client_states
from lightfed.core.sharded_client_states import ShardedClientStates
from lightfed.core.sharding import CoordinateShards


def _write(folder, world, states_of_rank) -> None:
    """Each process's file, with its store under "clients" (as a strategy's)."""
    for rank in range(world):
        write_process_state(folder, rank, world, {"clients": states_of_rank(rank).process_state()})


def _read(folder, world):
    read = reader(folder, world)
    return lambda rank: read(rank)["clients"]


def _client_states(world: int, rank: int) -> ClientStates:
    states = ClientStates()
    for client_id in range(rank, 7, world):  # client i lives on process i % world
        states.set(client_id, "c", torch.full((3,), float(client_id)))
    return states


def test_with_the_same_number_of_processes_each_reads_only_its_own_file(tmp_path):
    _write(tmp_path, 2, lambda rank: _client_states(2, rank))
    (tmp_path / "process_1_of_2.pt").unlink()  # process 0 must not need it
    loaded = ClientStates()
    loaded.load_process_states(_read(tmp_path, 2), saved_world=2, rank=0, world=2)
    assert loaded.state_dict().keys() == {0, 2, 4, 6}
    assert torch.equal(loaded.get(4, "c"), torch.full((3,), 4.0))


def test_another_number_of_processes_takes_its_clients_from_every_file(tmp_path):
    _write(tmp_path, 2, lambda rank: _client_states(2, rank))
    for rank in range(3):
        loaded = ClientStates()
        loaded.load_process_states(_read(tmp_path, 2), saved_world=2, rank=rank, world=3)
        assert loaded.state_dict().keys() == set(range(rank, 7, 3))
        assert all(torch.equal(loaded.get(i, "c"), torch.full((3,), float(i))) for i in range(rank, 7, 3))


def _sharded(world: int, rank: int, whole: dict) -> ShardedClientStates:
    states = ShardedClientStates(CoordinateShards(10, world, rank).local, 10)
    for client_id, vector in whole.items():
        states.set(client_id, "current", vector[states.shard])
        states.set(client_id, "round", torch.tensor(client_id))
    return states


def test_sharded_states_are_resliced_for_any_number_of_processes(tmp_path):
    whole = {3: torch.arange(10.0), 5: torch.arange(10.0) * -2}
    _write(tmp_path, 3, lambda rank: _sharded(3, rank, whole))  # slices of 4, 4, 2 coordinates
    for world in (1, 2, 4):
        for rank in range(world):
            shard = CoordinateShards(10, world, rank).local
            loaded = ShardedClientStates(shard, 10)
            loaded.load_process_states(_read(tmp_path, 3), saved_world=3, rank=rank, world=world)
            for client_id, vector in whole.items():
                assert torch.equal(loaded.get(client_id, "current"), vector[shard])
                assert loaded.get(client_id, "round") == client_id


def test_sharded_states_read_only_their_own_file_when_the_processes_are_the_same(tmp_path):
    whole = {3: torch.arange(10.0)}
    _write(tmp_path, 2, lambda rank: _sharded(2, rank, whole))
    (tmp_path / "process_0_of_2.pt").unlink()
    loaded = ShardedClientStates(CoordinateShards(10, 2, 1).local, 10)
    loaded.load_process_states(_read(tmp_path, 2), saved_world=2, rank=1, world=2)
    assert torch.equal(loaded.get(3, "current"), torch.arange(5.0, 10.0))


def _new_bytes(folder, *earlier) -> int:
    """Bytes of the segment files in ``folder`` that are not another name of a file in ``earlier`` (hard links)."""
    linked = {path.stat().st_ino for each in earlier if each.exists() for path in each.glob("*.bin")}
    return sum(path.stat().st_size for path in folder.glob("*.bin") if path.stat().st_ino not in linked)


def test_a_checkpoint_writes_only_the_sharded_states_set_since_the_one_before(tmp_path):
    whole = {i: torch.randn(1000) for i in range(6)}
    states = ShardedClientStates(slice(0, 1000), 1000)
    for client_id, vector in whole.items():  # a 1000-float current and a 0-d round per client
        states.set(client_id, "current", vector)
        states.set(client_id, "round", torch.tensor(client_id))
    vector, scalar = 4000, 8  # bytes: float32 x 1000, one int64
    _write(tmp_path / "a", 1, lambda rank: states)
    assert _new_bytes(tmp_path / "a") == 6 * (vector + scalar)
    for client_id in (1, 4):
        whole[client_id] = torch.randn(1000)
        states.overwrite(client_id, "current", whole[client_id])
    _write(tmp_path / "b", 1, lambda rank: states)
    assert _new_bytes(tmp_path / "b", tmp_path / "a") == 2 * vector + 6 * (vector + scalar)  # and a's, once: a copy
    whole[3] = torch.zeros(1000)
    states.overwrite(3, "current", whole[3])
    _write(tmp_path / "c", 1, lambda rank: states)  # a's segment: a's file again; b's new one: a copy
    assert _new_bytes(tmp_path / "c", tmp_path / "a", tmp_path / "b") == vector + 2 * vector
    shutil.rmtree(tmp_path / "a")  # pruned: the newer checkpoints' links keep the segments
    resumed = ShardedClientStates(slice(0, 1000), 1000)
    resumed.load_process_states(_read(tmp_path / "c", 1), saved_world=1, rank=0, world=1)
    assert all(torch.equal(resumed.get(i, "current"), v) and resumed.get(i, "round") == i for i, v in whole.items())
    resumed.overwrite(2, "current", torch.zeros(1000))
    _write(tmp_path / "d", 1, lambda rank: resumed)  # after a resume: one client's bytes and a copy of each segment
    assert _new_bytes(tmp_path / "d", tmp_path / "b", tmp_path / "c") == vector + 6 * (vector + scalar) + 3 * vector


def test_sharded_states_load_from_files_that_hold_the_tensors(tmp_path):
    """What earlier builds wrote: the tensors themselves in the process file."""
    whole = {3: torch.arange(10.0), 5: torch.arange(10.0) * -2}
    for rank in range(2):
        tensors = _sharded(2, rank, whole).state_dict()
        write_process_state(tmp_path, rank, 2, {"clients": tensors})
    loaded = ShardedClientStates(slice(0, 10), 10)
    loaded.load_process_states(_read(tmp_path, 2), saved_world=2, rank=0, world=1)
    assert all(torch.equal(loaded.get(i, "current"), v) for i, v in whole.items())


class Owner:
    """A strategy or a privacy mechanism, as ``ProcessStores`` sees it: its stores by name."""

    def __init__(self, **stores) -> None:
        self._stores = stores

    def stores(self) -> dict:
        return self._stores


def test_saved_client_states_joins_the_files_of_a_checkpoint(tmp_path):
    folder = tmp_path / "process_states" / "round_4"
    whole = {3: torch.arange(10.0), 5: torch.arange(10.0) * -2}
    checksums = []
    for rank in range(2):
        shard = CoordinateShards(10, 2, rank).local
        strategy = Owner(clients=_sharded(2, rank, whole), server=ShardedVectors(dict, shard, 10))  # a sharded strategy
        checksums.append(write_process_state(folder, rank, 2, ProcessStores(strategy, None).process_state()))
    torch.save({"process_states": {"folder": "round_4", "world_size": 2, "sha256": checksums}}, tmp_path / "last.ckpt")
    joined = saved_client_states(tmp_path / "last.ckpt")
    assert joined.keys() == whole.keys() and all(torch.equal(joined[i]["current"], v) for i, v in whole.items())


def test_each_store_is_saved_under_its_name_and_the_server_vectors_are_resliced(tmp_path):
    """A sharded strategy's own vectors (its ``sharded_state``) and a privacy mechanism's store beside the clients'
    states, written by two processes and read back by one."""
    total = torch.arange(10.0) * 3

    def run(world, rank, server, accountants):
        privacy = ClientStates()
        for client_id in accountants:
            privacy.set(client_id, "accountant", torch.tensor([[1.0, 0.5, float(client_id)]]))
        shard = CoordinateShards(10, world, rank).local
        strategy = Owner(clients=_sharded(world, rank, {}), server=ShardedVectors(lambda: server, shard, 10))
        return ProcessStores(strategy, Owner(privacy=privacy))

    for rank in range(2):
        server = {"total": total[CoordinateShards(10, 2, rank).local]}
        write_process_state(tmp_path, rank, 2, run(2, rank, server, accountants=[rank, rank + 2]).process_state())
    kept = torch.zeros(10)
    loaded = run(1, 0, {"total": kept}, accountants=[])
    loaded.load_process_states(reader(tmp_path, 2), saved_world=2, rank=0, world=1)
    assert torch.equal(kept, total)  # copied into the live tensor, joined from both files
    privacy = loaded.stores["privacy"]
    assert privacy.state_dict().keys() == {0, 1, 2, 3}
    assert privacy.get(3, "accountant").tolist() == [[1.0, 0.5, 3.0]]
