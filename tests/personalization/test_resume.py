"""Personal weights live in the per-client store: saved per process and restored bit for bit on resume, on one process
and on two, and from two processes' files onto one."""

import shutil
from pathlib import Path

import pytest
import torch

from lightfed.cli import run
from tests.conftest import fit_in_subprocess, trainer_options
from tests.personalization.conftest import personal_store, saved_personal_states

ROOT = Path(__file__).resolve().parents[2]
TRANSFORM = {"ditto": "ditto", "fedbn": "fed_bn"}  # each config's transform, by its name in the process files
CONFIGS = [
    "--config",
    str(ROOT / "configs" / "digits" / "base.yaml"),
    "--config",
    str(ROOT / "configs" / "personalization" / "base.yaml"),
]
TINY = [
    *trainer_options(
        clients_per_round=4,
        local_epochs="null",
        local_steps=2,
        client_eval_interval=0,
        unseen_clients=0,
        name="run",
    ),
    "--model.init_args.width",
    "4",
    "--data.partitioner.init_args.num_clients",
    "8",
    *trainer_options(progress_bar="false"),
]


def _fit(root: Path, method: str, devices: int, rounds: int, *extra: str) -> dict:
    """The last checkpoint of a run of ``rounds`` rounds, with every client's saved personal state."""
    options = [
        *CONFIGS,
        "--config",
        str(ROOT / "configs" / "personalization" / f"{method}.yaml"),
        *TINY,
        *trainer_options(rounds=str(rounds)),
        *extra,
    ]
    if devices == 1:
        run(["fit", *options, "--trainer.root_dir", str(root)])
    else:
        root.mkdir(parents=True, exist_ok=True)
        fit_in_subprocess(options[1], root, devices, *options[2:])
    path = root / "run" / "version_0" / "checkpoints" / "last.ckpt"
    return {**torch.load(path, weights_only=False), "client_states": saved_personal_states(path, TRANSFORM[method])}


def _same(a: dict, b: dict) -> bool:
    states = a["client_states"]
    return (
        torch.equal(a["params"], b["params"])
        and states.keys() == b["client_states"].keys()
        and all(torch.equal(v, b["client_states"][i][k]) for i, s in states.items() for k, v in s.items())
    )


@pytest.mark.parametrize("method", ["ditto"])  # (FedBN on one process: resumed from two processes' files below)
def test_personal_weights_survive_a_resume_on_one_process(tmp_path, method):
    straight = _fit(tmp_path / "straight", method, 1, 3)
    assert straight["client_states"] and all("personal" in s for s in straight["client_states"].values())
    _fit(tmp_path / "cut", method, 1, 2)
    assert _same(_fit(tmp_path / "cut", method, 1, 3, "--ckpt_path", "last"), straight)


@pytest.mark.slow
def test_fedbn_personal_weights_survive_a_resume_on_two_processes_and_from_two_onto_one(tmp_path):
    straight = _fit(tmp_path / "straight", "fedbn", 2, 3)
    folder = tmp_path / "straight" / "run" / "version_0" / "checkpoints" / "process_states" / "round_3"
    for rank in range(2):
        held = torch.load(folder / f"process_{rank}_of_2.pt", weights_only=False)[personal_store("fed_bn")]
        assert held and all(client_id % 2 == rank and "personal_buffers" in s for client_id, s in held.items())
    _fit(tmp_path / "cut", "fedbn", 2, 2)
    shutil.copytree(tmp_path / "cut", tmp_path / "cut_to_one")
    assert _same(_fit(tmp_path / "cut", "fedbn", 2, 3, "--ckpt_path", "last"), straight)
    assert _same(_fit(tmp_path / "cut_to_one", "fedbn", 1, 3, "--ckpt_path", "last"), straight)
