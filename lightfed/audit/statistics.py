"""What the attacks read of a trained model: each client's examples' losses and LiRA's logit-scaled confidences
log(p_y / (1 - p_y)), on the examples it trains on (held in) and on its held-out share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from lightning import LightningModule
from torch import Tensor

from lightfed.data.module import FederatedDataModule


@dataclass(frozen=True)
class ClientStatistics:
    """One client's per-example values (numpy float64 arrays)."""

    loss_in: np.ndarray
    phi_in: np.ndarray
    loss_out: np.ndarray
    phi_out: np.ndarray


def loss_and_phi(logits: Tensor, targets: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Cross-entropy and log(p_y / (1 - p_y)) = logit_y - logsumexp of the other logits, per example."""
    logits = logits.double()
    picked = logits.gather(1, targets[:, None]).squeeze(1)
    others = logits.scatter(1, targets[:, None], float("-inf"))
    loss = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    return loss.cpu().numpy(), (picked - torch.logsumexp(others, dim=1)).cpu().numpy()


@torch.no_grad()
def _of_batch(module: LightningModule, x: Tensor, y: Tensor) -> tuple[np.ndarray, np.ndarray]:
    if len(y) == 0:
        return np.zeros(0), np.zeros(0)
    device = next(module.parameters()).device
    return loss_and_phi(module(x.to(device)), y.to(device).long())


def client_statistics(module: LightningModule, data: FederatedDataModule, client_id: int) -> ClientStatistics:
    """The values of one client's training examples and of its held-out share (``data.client_val_fraction``)."""
    x_in, y_in = data.client_subset(client_id, torch.arange(data.client_size(client_id)))[:2]
    held = data.client_val_indices(client_id)
    x_out, y_out = data.train_x[held], data.train_y[held]
    loss_in, phi_in = _of_batch(module, x_in, y_in)
    loss_out, phi_out = _of_batch(module, x_out, y_out)
    return ClientStatistics(loss_in, phi_in, loss_out, phi_out)


def all_statistics(module: LightningModule, data: FederatedDataModule) -> list[ClientStatistics]:
    """``client_statistics`` of every client, in the module's evaluation mode."""
    training = module.training
    module.eval()
    try:
        return [client_statistics(module, data, k) for k in range(data.num_clients)]
    finally:
        module.train(training)
