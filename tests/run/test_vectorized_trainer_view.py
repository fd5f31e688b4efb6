"""What ``self.trainer`` says inside vectorized training: ``global_step`` and a ``current_epoch`` the clients
computed together share are each client's own; ``client_id`` and an epoch they do not share make ``auto`` train one
client at a time (one line says so) and ``vectorized`` refuse in one line, as a random draw does in any round."""

import pytest
import torch
from lightning import LightningModule
from torch import nn

from lightfed.data import Synthetic
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.run.client_workers import torch_threads
from lightfed.run.vectorized_clients import VectorizedClients
from lightfed.strategies import FedAvg
from tests.conftest import small_trainer


class VNet(LightningModule):
    """A plain LightningModule around a 60-64-10 MLP, with a ``training_step`` of its own (vectorized under vmap)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(60, 64), nn.ReLU(), nn.Linear(64, 10))

    def loss(self, batch, inputs=None):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x if inputs is None else inputs), y)

    def training_step(self, batch, batch_idx):
        return self.loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.loss(batch))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self.loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class CountersNet(VNet):
    """Weighs its loss by the local epoch and step."""

    def training_step(self, batch, batch_idx):
        return self.loss(batch) / (1 + self.current_epoch + 0.1 * self.global_step)


class StepsNet(VNet):
    """Weighs its loss by the local step only (the same for every client at a step)."""

    def training_step(self, batch, batch_idx):
        return self.loss(batch) / (1 + 0.1 * self.global_step)


class ClientIdNet(VNet):
    """Weighs its loss by its client's id."""

    def training_step(self, batch, batch_idx):
        return self.loss(batch) * (1 + self.trainer.client_id % 3)


class LateNoiseNet(VNet):
    """Draws input noise from the second round on."""

    def training_step(self, batch, batch_idx):
        x, _ = batch
        noisy = x + 0.01 * torch.randn_like(x) if self.trainer.round >= 1 else x
        return self.loss(batch, noisy)


def _fit(root, model, rounds=2, ckpt_path=None, **settings):
    """2 epochs a round of 10 clients of Synthetic(1, 1) (lognormal sizes: their epochs end at different steps)."""
    trainer = small_trainer(root, rounds=rounds, local_steps=None, local_epochs=2, clients_per_round=10, **settings)
    trainer.fit(model, FederatedDataModule(Synthetic(num_clients=20), batch_size=10), FedAvg(), ckpt_path=ckpt_path)
    return trainer


def _one_at_a_time(root, model, **settings):
    with torch_threads(1):
        return _fit(root, model, clients_in_parallel=1, **settings).params


def _fallback_lines(capsys):
    return [line for line in capsys.readouterr().out.splitlines() if "does not train vectorized" in line]


def test_each_clients_global_step_is_its_own_vectorized(tmp_path, capsys):
    auto = _fit(tmp_path / "auto", StepsNet(), rounds=1)
    assert isinstance(auto.workers, VectorizedClients) and not _fallback_lines(capsys)
    one = _one_at_a_time(tmp_path / "one", StepsNet(), rounds=1)
    assert float((auto.params - one).abs().max() / one.abs().max()) <= 1e-5
    unweighted = _one_at_a_time(tmp_path / "unweighted", VNet(), rounds=1)
    assert float((unweighted - one).abs().max() / one.abs().max()) > 1e-3  # the weighing shows


@pytest.mark.parametrize(("model", "read"), [(CountersNet, "current_epoch"), (ClientIdNet, "client_id")])
def test_a_value_that_differs_between_the_clients_trained_together_trains_one_at_a_time_under_auto(
    tmp_path, capsys, model, read
):
    auto = _fit(tmp_path / "auto", model())
    lines = _fallback_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith(
        f"trainer.clients_in_parallel auto trains one client at a time: {model.__name__} does not train vectorized "
        f"(DiffersByClient: reads trainer.{read} in training_step, which differs between the clients trained together)"
    )
    assert torch.equal(auto.params, _one_at_a_time(tmp_path / "one", model()))


@pytest.mark.parametrize(("model", "read"), [(CountersNet, "current_epoch"), (ClientIdNet, "client_id")])
def test_explicit_vectorized_training_refuses_a_value_that_differs_between_its_clients_in_one_line(
    tmp_path, model, read
):
    with pytest.raises(ConfigError, match=f"{model.__name__} reads trainer.{read} in training_step") as refused:
        _fit(tmp_path, model(), clients_in_parallel="vectorized")
    assert "\n" not in str(refused.value)


def test_a_random_draw_from_the_second_round_on_trains_one_at_a_time_from_then_on_under_auto(tmp_path, capsys):
    """The second round as one at a time trains it from the first round's weights (a resume at round 1)."""
    auto = _fit(tmp_path / "auto", LateNoiseNet())
    lines = _fallback_lines(capsys)
    assert len(lines) == 1 and "LateNoiseNet does not train vectorized (RuntimeError: vmap: called random" in lines[0]
    assert isinstance(_fit(tmp_path / "resumed", LateNoiseNet(), rounds=1).workers, VectorizedClients)
    resumed = _one_at_a_time(tmp_path / "resumed", LateNoiseNet(), ckpt_path="last")
    assert torch.equal(auto.params, resumed)


def test_explicit_vectorized_training_refuses_a_random_draw_from_the_second_round_on_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="LateNoiseNet draws random numbers in training_step") as refused:
        _fit(tmp_path, LateNoiseNet(), clients_in_parallel="vectorized")
    assert "\n" not in str(refused.value)
