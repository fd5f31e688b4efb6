"""Fixed points of the strategies on heterogeneous least-squares clients, trained through the real engine."""

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lightfed.data import DatasetSource, TensorSplits
from lightfed.data.module import FederatedDataModule
from lightfed.heterogeneity import LocalWork
from lightfed.strategies import FedAvg, FedNova, Scaffold
from tests.conftest import small_trainer

DIM, CLIENTS, EXAMPLES = 4, 6, 8


class LeastSquaresClients(DatasetSource):
    """Client i holds (x, y) pairs of its own quadratic f_i(w) = mean (x.w - y)^2 / 2.

    ``same_curvature``: x = sqrt(d) e_j, so every f_i = ||w - c_i||^2 / 2 + const (Hessian I), optimum c_i.
    Otherwise each client scales the features differently, so the Hessians differ.
    """

    def __init__(self, same_curvature: bool) -> None:
        self.same_curvature = same_curvature

    def load(self, seed: int) -> TensorSplits:
        rng = np.random.default_rng(seed)
        xs, ys = [], []
        for _i in range(CLIENTS):
            if self.same_curvature:
                x = np.sqrt(DIM) * np.tile(np.eye(DIM), (EXAMPLES // DIM, 1))
            else:
                x = rng.normal(size=(EXAMPLES, DIM)) * rng.uniform(0.3, 1.5, size=DIM)
            ys.append(x @ rng.normal(size=DIM) * 2 + rng.normal(size=EXAMPLES))
            xs.append(x)
        x, y = (
            torch.tensor(np.concatenate(xs), dtype=torch.float32),
            torch.tensor(np.concatenate(ys), dtype=torch.float32),
        )
        clients = [np.arange(i * EXAMPLES, (i + 1) * EXAMPLES) for i in range(CLIENTS)]
        return TensorSplits(x, y, x[:1], y[:1], num_classes=0, client_indices=clients)


class LeastSquares(L.LightningModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.w = nn.Parameter(torch.zeros(DIM))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(x @ self.w, y) / 2

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.training_step(batch, batch_idx))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def _fit(
    tmp_path, strategy, same_curvature: bool, lr: float, rounds: int, local_steps
) -> tuple[np.ndarray, FederatedDataModule]:
    model = LeastSquares(lr)  # every example trains: no validation split
    data = FederatedDataModule(LeastSquaresClients(same_curvature), batch_size=EXAMPLES, val_fraction=0.0)
    trainer = small_trainer(
        tmp_path,
        rounds=rounds,
        clients_per_round=CLIENTS,
        local_steps=local_steps,
        eval_interval=rounds,
        checkpoint_interval=rounds,
    )
    trainer.fit(model, data, strategy)
    return model.w.detach().double().numpy(), data


def _optimum(data: FederatedDataModule) -> np.ndarray:
    """argmin of the mean over clients of f_i (equal client sizes): solves sum_i H_i w = sum_i b_i in float64."""
    x, y = data.train_x.double().numpy(), data.train_y.double().numpy()
    return np.linalg.solve(x.T @ x, x.T @ y)


def _relative_error(w: np.ndarray, target: np.ndarray) -> float:
    return float(np.linalg.norm(w - target) / np.linalg.norm(target))


def test_scaffold_reaches_the_exact_optimum_where_fedavg_stays_biased(tmp_path):
    w_scaffold, data = _fit(tmp_path / "scaffold", Scaffold(), same_curvature=False, lr=0.1, rounds=150, local_steps=5)
    w_fedavg, _ = _fit(tmp_path / "fedavg", FedAvg(), same_curvature=False, lr=0.1, rounds=150, local_steps=5)
    optimum = _optimum(data)
    assert _relative_error(w_scaffold, optimum) < 1e-6
    assert _relative_error(w_fedavg, optimum) > 1e-2


@pytest.mark.slow
def test_fednova_removes_the_objective_inconsistency_of_unequal_local_steps(tmp_path):
    lr, steps = 0.01, "randint:1:10"
    w_nova, data = _fit(tmp_path / "nova", FedNova(), same_curvature=True, lr=lr, rounds=400, local_steps=steps)
    w_fedavg, _ = _fit(tmp_path / "fedavg", FedAvg(), same_curvature=True, lr=lr, rounds=400, local_steps=steps)
    tau = np.array([LocalWork(None, steps).draw(0, 0, i)[1] for i in range(CLIENTS)], dtype=float)
    assert len(set(tau)) > 2  # the clients really do unequal work
    c = np.stack([_optimum_of_client(data, i) for i in range(CLIENTS)])
    contraction = 1 - (1 - lr) ** tau  # one client's GD on ||w - c_i||^2 / 2 moves this share of the way to c_i
    # fixed points: FedAvg weights clients by their contraction, FedNova by contraction / (lr tau), which -> 1
    fedavg_point = contraction @ c / contraction.sum()
    nova_weights = contraction / (lr * tau)
    assert _relative_error(w_fedavg, fedavg_point) < 1e-5
    assert _relative_error(w_nova, nova_weights @ c / nova_weights.sum()) < 1e-5
    optimum = c.mean(axis=0)
    assert _relative_error(w_nova, optimum) < 0.1 * _relative_error(w_fedavg, optimum)


def _optimum_of_client(data: FederatedDataModule, client_id: int) -> np.ndarray:
    index = data._client_indices[client_id].numpy()
    x, y = data.train_x[index].double().numpy(), data.train_y[index].double().numpy()
    return np.linalg.solve(x.T @ x, x.T @ y)


def test_fednova_equals_fedavg_when_every_client_takes_the_same_steps(tmp_path):
    w_nova, _ = _fit(tmp_path / "nova", FedNova(), same_curvature=False, lr=0.05, rounds=5, local_steps=3)
    w_fedavg, _ = _fit(tmp_path / "fedavg", FedAvg(), same_curvature=False, lr=0.05, rounds=5, local_steps=3)
    np.testing.assert_allclose(w_nova, w_fedavg, rtol=1e-6, atol=1e-7)
