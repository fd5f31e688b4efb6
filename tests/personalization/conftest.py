"""Tiny personalization runs in the test process, and the personal weights a checkpoint holds."""

from functools import partial
from pathlib import Path

import lightning as L
import torch
from torch import nn

from lightfed.core.disk_client_states import DiskClientStates
from lightfed.core.process_states import FOLDER, LINKED, reader
from lightfed.data import Digits, ShardPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.models.classifier import ClassificationModule


class LinearNet(ClassificationModule):
    """Multinomial logistic regression on the 64 pixels of a digit: ``net.1`` is its only layer."""

    def __init__(self, lr: float) -> None:
        super().__init__(10, optimizer=partial(torch.optim.SGD, lr=lr))
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


def linear_net(lr: float = 0.1) -> LinearNet:
    L.seed_everything(0, verbose=False)
    return LinearNet(lr)


def pathological_data(num_clients: int, batch_size: int = 16, client_val_fraction: float = 0.0) -> FederatedDataModule:
    return FederatedDataModule(
        Digits(), ShardPartitioner(num_clients, 2), batch_size=batch_size, client_val_fraction=client_val_fraction
    )


def personal_store(transform: str) -> str:
    """The name of the per-client store of the transform named ``transform`` (``fed_bn``) in a process file."""
    return f"{transform}.clients"


def saved_personal_states(checkpoint: Path, transform: str) -> dict[int, dict[str, torch.Tensor]]:
    """Every client's state in the per-client store of the transform named ``transform`` that the checkpoint's
    process files hold, in memory or linked files (``saved_client_states`` reads the strategy's store)."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)["process_states"]
    world, name = saved["world_size"], personal_store(transform)
    read = reader(checkpoint.parent / FOLDER / saved["folder"], world)
    if LINKED not in read(0)[name]:
        return {i: s for rank in range(world) for i, s in read(rank)[name].items()}
    store = DiskClientStates()
    store.load_process_states(lambda rank: read(rank)[name], world, rank=0, world=1)
    return store.state_dict()
