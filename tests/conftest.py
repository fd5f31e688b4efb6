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
        sys.executable,
        "-m",
        "lightfed",
        "fit",
        "--config",
        str(config),
        "--trainer.devices",
        str(devices),
        "--trainer.root_dir",
        str(root),
        "--trainer.progress_bar",
        "false",
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
            _, stderr = run.communicate()
        pytest.fail(f"lightfed fit ran past 600 s; the stacks of its processes:\n{stderr.decode()[-30000:]}")
    if run.returncode:
        pytest.fail(f"lightfed fit exited with {run.returncode}:\n{stderr.decode()[-30000:]}")
