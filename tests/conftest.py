"""Shared builders: a tiny digits federation that trains in about a second."""

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
    return SmallCNN(width=8, lr=lr, momentum=momentum)


def small_data(num_clients: int = 8) -> FederatedDataModule:
    return FederatedDataModule(Digits(), DirichletPartitioner(num_clients, alpha=0.5), batch_size=16)


def small_trainer(root, **overrides) -> FederatedTrainer:
    settings = dict(accelerator="cpu", rounds=3, clients_per_round=4, local_steps=5, local_epochs=None,
                    root_dir=str(root), progress_bar=False)
    return FederatedTrainer(**{**settings, **overrides})
