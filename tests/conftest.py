"""Shared builders: a tiny digits federation that trains in about a second."""

import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import lightning as L
import pytest
import torch

from lightfed.core.saved_client_states import saved_client_states
from lightfed.data import Digits, DirichletPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.models import SmallCNN
from lightfed.trainer import FederatedTrainer


@pytest.fixture(autouse=True)
def _one_thread():
    """Same kernels, same bits: one intra-op thread in every test process."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_model(lr: float = 0.1, momentum: float = 0.5) -> SmallCNN:
    L.seed_everything(0, verbose=False)
    return SmallCNN(width=8, optimizer=partial(torch.optim.SGD, lr=lr, momentum=momentum))


def small_data(num_clients: int = 8) -> FederatedDataModule:
    return FederatedDataModule(Digits(), DirichletPartitioner(num_clients, alpha=0.5), batch_size=16)


QUICKSTART = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
LIGHTFED = [sys.executable, "-m", "lightfed"]  # the command, as a user runs it


def trainer_options(**settings: object) -> list[str]:
    """``--trainer.<key> <value>`` for each setting, in order, as a command line gives them."""
    return [option for key, value in settings.items() for option in (f"--trainer.{key}", str(value))]


def config_options(*configs: object) -> list[str]:
    """``--config <file>`` for each config file, in order."""
    return [option for config in configs for option in ("--config", str(config))]


def refusal_lines(argv: list[str], capsys: pytest.CaptureFixture) -> list[str]:
    """The ``lightfed: error:`` lines ``lightfed`` prints when it refuses ``argv``, which it must with exit status 2."""
    from lightfed.cli import main

    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("lightfed: error:")]


def quickstart_command(root: Path, devices: int, *extra: str, **settings: object) -> list[str]:
    """``lightfed fit`` of the quickstart on ``devices`` processes, its runs under ``root``, no progress bar and no
    per-client evaluation, with more trainer ``settings``, then ``extra`` arguments."""
    quiet = {"client_eval_interval": 0, "progress_bar": "false"}
    options = trainer_options(devices=devices, root_dir=root, **{**quiet, **settings})
    return [*LIGHTFED, "fit", "--config", str(QUICKSTART), *options, *extra]


def scaffold_run(root: Path, devices: int, rounds: int, *extra: str, **settings: object) -> dict:
    """``lightfed fit`` of digits' SCAFFOLD config (run ``run`` under ``root``) on ``devices`` processes for
    ``rounds`` rounds, with more trainer ``settings`` and ``extra`` arguments; its last checkpoint, with each client's
    saved state under ``client_states``."""
    digits = QUICKSTART.parent / "digits"
    configs = ["--config", str(digits / "base.yaml"), "--config", str(digits / "scaffold.yaml")]
    quiet = {"progress_bar": "false", "client_eval_interval": 0}
    options = trainer_options(rounds=rounds, name="run", devices=devices, root_dir=root, **{**quiet, **settings})
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [*LIGHTFED, "fit", *configs, *options, *extra]
    subprocess.run(command, check=True, cwd=root.parent, env=environment, capture_output=True, timeout=600)
    path = root / "run" / "version_0" / "checkpoints" / "last.ckpt"
    return {**torch.load(path, weights_only=False), "client_states": saved_client_states(path)}


def small_trainer(root, **overrides) -> FederatedTrainer:
    settings = dict(
        accelerator="cpu",
        rounds=3,
        clients_per_round=4,
        local_steps=5,
        local_epochs=None,
        root_dir=str(root),
        progress_bar=False,
    )
    return FederatedTrainer.from_settings(**{**settings, **overrides})


def fit_in_subprocess(config: Path, root: Path, devices: int, *options: str) -> None:
    """``lightfed fit`` of ``config`` on ``devices`` CPU processes (one torch thread each), its runs under ``root``.

    A failure shows the run's stderr; a run still going after 600 s is sent SIGABRT first, so that every process of
    the run (its ranks, their DataLoader workers) prints each thread's Python stack (``PYTHONFAULTHANDLER``)."""
    command = [
        *LIGHTFED,
        "fit",
        "--config",
        str(config),
        *trainer_options(devices=str(devices), root_dir=str(root), progress_bar="false"),
        *options,
    ]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONFAULTHANDLER": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }
    run = subprocess.Popen(
        command, cwd=root.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        _, stderr = run.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGABRT)
        try:
            _, stderr = run.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            _, stderr = run.communicate(timeout=60)
        pytest.fail(f"lightfed fit ran past 600 s; the stacks of its processes:\n{stderr.decode()[-30000:]}")
    if run.returncode:
        pytest.fail(f"lightfed fit exited with {run.returncode}:\n{stderr.decode()[-30000:]}")


def same_weights_on_two_processes(tmp_path: Path, *options: str) -> bool:
    """Whether ``lightfed fit`` of the quickstart with ``options`` (``fit_in_subprocess``, checking every round that
    both processes hold the same weights) ends with the same parameters, bit for bit, on one process and on two."""

    def params(devices: int) -> torch.Tensor:
        root = tmp_path / f"devices{devices}"
        fit_in_subprocess(QUICKSTART, root, devices, *trainer_options(check_replicas="true"), *options)
        return torch.load(next(root.glob("*/version_0/checkpoints/last.ckpt")), weights_only=False)["params"]

    return torch.equal(params(1), params(2))
