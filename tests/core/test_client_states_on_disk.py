"""``trainer.client_states: disk`` for every strategy that remembers something per client: the weights and the saved
states of the in-memory store, with the states really in linked files, and a resume to them; refused on the sharded
path in one line."""

import os
from pathlib import Path

import pytest
import torch

from lightfed.cli import run
from lightfed.core.process_states import FOLDER, LINKED, reader
from lightfed.core.saved_client_states import saved_client_states
from lightfed.ecado.fedecado import FedECADO
from lightfed.errors import ConfigError
from lightfed.personalization import FedPer
from lightfed.strategies import FedAvg, Scaffold
from tests.asynchronous.test_asynchronous import MASFL, SMALL
from tests.conftest import small_data, small_model, small_trainer, trainer_options
from tests.personalization.conftest import linear_net, pathological_data, personal_store, saved_personal_states


def _linked(checkpoint: Path, store: str = "clients") -> bool:
    """Whether the checkpoint's per-client state (the strategy's store, or another ``store``) is in linked files (the
    disk store), not in its process file."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)["process_states"]
    return LINKED in reader(checkpoint.parent / FOLDER / saved["folder"], saved["world_size"])(0)[store]


def _fedper(root: Path, rounds: int, store: str, **options) -> tuple[torch.Tensor, Path]:
    model = linear_net()
    trainer = small_trainer(root, rounds=rounds, logger=False, client_states=store, client_states_folder=str(root))
    trainer.fit(model, pathological_data(8), FedAvg(), transforms=[FedPer(personal=["net.1.bias"])], **options)
    return torch.cat(
        [p.detach().reshape(-1) for p in model.parameters()]
    ), trainer.log_dir / "checkpoints" / "last.ckpt"


def test_personal_weights_on_disk_give_the_in_memory_run_and_resume_to_it(tmp_path):
    in_memory, memory_checkpoint = _fedper(tmp_path / "memory", 3, "memory")
    on_disk, disk_checkpoint = _fedper(tmp_path / "disk", 3, "disk")
    _fedper(tmp_path / "cut", 2, "disk")
    resumed, resumed_checkpoint = _fedper(tmp_path / "cut", 3, "disk", ckpt_path="last")
    assert torch.equal(on_disk, in_memory) and torch.equal(resumed, in_memory)
    store = personal_store("fed_per")
    assert (
        not _linked(memory_checkpoint, store) and _linked(disk_checkpoint, store) and _linked(resumed_checkpoint, store)
    )
    expected = saved_personal_states(memory_checkpoint, "fed_per")
    assert len(expected) > 0
    for checkpoint in (disk_checkpoint, resumed_checkpoint):
        states = saved_personal_states(checkpoint, "fed_per")
        assert states.keys() == expected.keys()
        assert all(torch.equal(states[i][k], v) for i, s in expected.items() for k, v in s.items())


def test_an_asynchronous_strategys_state_on_disk_gives_the_in_memory_run(tmp_path):
    def fit(store: str) -> Path:
        run(
            [
                "fit",
                *MASFL,
                *SMALL,
                *trainer_options(
                    root_dir=str(tmp_path / store),
                    name="run",
                    client_states=store,
                    client_states_folder=str(tmp_path / store),
                ),
            ]
        )
        return tmp_path / store / "run" / "version_0" / "checkpoints" / "last.ckpt"

    memory, disk = fit("memory"), fit("disk")
    assert torch.equal(torch.load(disk, weights_only=True)["params"], torch.load(memory, weights_only=True)["params"])
    assert _linked(disk) and not _linked(memory)
    expected, states = saved_client_states(memory), saved_client_states(disk)
    assert len(expected) > 0 and states.keys() == expected.keys()
    assert all(torch.equal(states[i][k], v) for i, s in expected.items() for k, v in s.items())


def test_the_sharded_path_refuses_the_disk_store_and_a_bad_store_is_refused(tmp_path):
    with pytest.raises(
        ConfigError, match='FedECADO keeps its per-client state sharded .* set trainer.client_states "memory"'
    ):
        small_trainer(tmp_path, client_states="disk").fit(linear_net(), pathological_data(8), FedECADO())
    with pytest.raises(ConfigError, match='trainer.client_states must be "memory" or "disk", got \'ssd\''):
        small_trainer(tmp_path, client_states="ssd")


def _scaffold(root: Path, rounds: int, **options) -> torch.Tensor:
    trainer = small_trainer(
        root,
        rounds=rounds,
        logger=False,
        client_states="disk",
        client_states_folder=str(root),
        clients_in_parallel=1,
        name="run",
    )
    trainer.fit(small_model(momentum=0.0), small_data(), Scaffold(), **options)
    return torch.load(trainer.checkpoint_path, weights_only=True)["params"]


def test_a_damaged_segment_is_never_used_again_and_the_run_resumes_to_its_uninterrupted_weights(tmp_path, capsys):
    expected = _scaffold(tmp_path / "whole", 8)
    _scaffold(tmp_path / "cut", 4)
    states = tmp_path / "cut" / "run" / "version_0" / "checkpoints" / FOLDER
    new_in_round_4 = [
        path for path in (states / "round_4").glob("*.bin") if not (states / "round_3" / path.name).exists()
    ]
    damaged = bytearray(new_in_round_4[0].read_bytes())
    damaged[3::4] = bytes(byte ^ 0x40 for byte in damaged[3::4])  # every float32's exponent: the same size
    new_in_round_4[0].write_bytes(damaged)
    _scaffold(tmp_path / "cut", 6, ckpt_path="last")  # round 4's checkpoint gives way to round 3's; round 4 again
    shared = [path for path in (states / "round_6").glob("*.bin") if (states / "round_5" / path.name).exists()]
    assert shared
    os.truncate(shared[0], 1000)  # a segment both checkpoints hold: the previous one's is another file
    assert torch.equal(_scaffold(tmp_path / "cut", 8, ckpt_path="last"), expected)
    assert capsys.readouterr().out.count("cannot be read") == 2
