"""SCAFFOLD with its control variates on disk: the weights of the in-memory store, and a run cut after round 2
resumes bit for bit on the same number of processes, and on another one within the 1-vs-2-process tolerance."""

import shutil
from pathlib import Path

import pytest
import torch

from lightfed.core.saved_client_states import saved_client_states
from lightfed.strategies import Scaffold
from tests.conftest import scaffold_run, small_data, small_model, small_trainer

ROOT = Path(__file__).resolve().parents[2]


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def _fit(root: Path, rounds: int, store: str, **options) -> tuple[torch.Tensor, Path]:
    model = small_model(momentum=0.0)
    trainer = small_trainer(root, rounds=rounds, logger=False)
    trainer.fit(
        model, small_data(), Scaffold(server_lr=0.9, client_states=store, client_states_folder=str(root)), **options
    )
    return _weights(model), trainer.log_dir / "checkpoints" / "last.ckpt"


def test_on_disk_it_gives_the_weights_and_states_of_the_in_memory_store_and_resumes_to_them(tmp_path):
    in_memory, memory_checkpoint = _fit(tmp_path / "memory", 4, "memory")
    on_disk, disk_checkpoint = _fit(tmp_path / "disk", 4, "disk")
    assert torch.equal(on_disk, in_memory)
    _fit(tmp_path / "cut", 2, "disk")
    resumed, resumed_checkpoint = _fit(tmp_path / "cut", 4, "disk", ckpt_path="last")
    assert torch.equal(resumed, in_memory)
    expected = saved_client_states(memory_checkpoint)
    for checkpoint in (disk_checkpoint, resumed_checkpoint):
        states = saved_client_states(checkpoint)
        assert states.keys() == expected.keys() and len(states) == 8
        assert all(torch.equal(states[i]["c"], s["c"]) for i, s in expected.items())


@pytest.mark.slow
@pytest.mark.parametrize("store", ["memory", "disk"])
def test_a_two_process_run_resumes_bit_for_bit_on_two_processes_and_on_one(tmp_path, store):
    """SCAFFOLD keeps each client's control variate on the process that trains it (i % 2), which writes it into its
    own checkpoint file (on disk: each run keeps its files in a folder of its own under ``states``, which a resume
    names again). A two-process run cut after round 2 resumes on two processes (each reads its own file) to the
    uninterrupted run's weights and control variates, and on one process (which takes every file's clients) to them
    within the 1-vs-2-process tolerance."""
    disk = ["--strategy.init_args.client_states", "disk", "--strategy.init_args.client_states_folder"]
    options = [*disk, str(tmp_path / "states")] if store == "disk" else []
    steps = {"clients_per_round": 6, "local_epochs": "null", "local_steps": 3} if store == "disk" else {}

    def fit(root: Path, devices: int, rounds: int, *extra: str) -> dict:
        return scaffold_run(root, devices, rounds, *options, *extra, **steps)

    straight = fit(tmp_path / "straight", 2, 3)
    if store == "memory":
        folder = tmp_path / "straight" / "run" / "version_0" / "checkpoints" / "process_states" / "round_3"
        for rank in range(2):
            held = torch.load(folder / f"process_{rank}_of_2.pt", weights_only=False)["clients"]
            assert held and all(client_id % 2 == rank for client_id in held)
    fit(tmp_path / "cut", 2, 2)
    shutil.copytree(tmp_path / "cut", tmp_path / "cut_to_one")
    resumed = fit(tmp_path / "cut", 2, 3, "--ckpt_path", "last")
    assert torch.equal(resumed["params"], straight["params"])
    assert resumed["client_states"].keys() == straight["client_states"].keys()
    assert all(torch.equal(s["c"], resumed["client_states"][i]["c"]) for i, s in straight["client_states"].items())
    on_one = fit(tmp_path / "cut_to_one", 1, 3, "--ckpt_path", "last")  # within the 1-vs-2-process tolerance
    assert (on_one["params"] - straight["params"]).abs().max() <= 1e-5
    assert on_one["client_states"].keys() == straight["client_states"].keys()
    assert all(
        (s["c"] - on_one["client_states"][i]["c"]).abs().max() <= 1e-5 for i, s in straight["client_states"].items()
    )
