"""Tiny personalization runs in the test process."""

from functools import partial

import lightning as L
import torch
from torch import nn

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
