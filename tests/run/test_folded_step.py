"""A user's own LightningModule trained vectorized without vmap (``folded_step``): every client of ragged sizes gets
its one-at-a-time update, its loss and what it logs, in one call a step; what it cannot fold trains under vmap."""

import copy
import math

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.fabric import Fabric
from torch import nn

from lightfed.core.messages import ClientPlan
from lightfed.data import Synthetic
from lightfed.data.module import FederatedDataModule
from lightfed.run.client import ClientTrainer
from lightfed.run.client_training import TrainingJob
from lightfed.run.folded_step import FoldedStep, NotFolded, may_fold
from lightfed.run.stacked_loss import StackedLoss
from lightfed.run.vectorized_clients import VectorizedClients

CPU = torch.device("cpu")


class Net(nn.Module):
    def __init__(self, dropout: float = 0.0, norm: bool = False) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(60, 16), nn.Linear(16, 10)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.BatchNorm1d(16) if norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.norm(F.relu(self.fc1(x)))))


class Plain(L.LightningModule):
    """A user's module: its own network, cross-entropy in training_step, the loss logged."""

    def __init__(self, **net: object) -> None:
        super().__init__()
        self.net = Net(**net)  # type: ignore[arg-type]

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.5)


class BatchMean(Plain):
    """Adds a term over the whole batch: computed folded, it would mix the clients."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        return F.cross_entropy(logits, y) + logits.mean(0).pow(2).sum()


class Penalised(Plain):
    """A penalty on a weight: a function of a client's rows that the folded step does not compute."""

    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx) + 0.01 * self.net.fc1.weight.pow(2).sum()


class SizeChecked(Plain):
    """Reads the size of its batch: it fails on folded batches."""

    def training_step(self, batch, batch_idx):
        assert len(batch[0]) <= 10, "a batch of at most 10"
        return super().training_step(batch, batch_idx)


class Summed(Plain):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y, reduction="sum")


def _pair(model):
    data = FederatedDataModule(Synthetic(alpha=1.0, beta=1.0, num_clients=12), batch_size=10)
    data.setup(seed=0, device=CPU)
    fabric = Fabric(accelerator="cpu", devices=1)
    return ClientTrainer(fabric, model, data), VectorizedClients(ClientTrainer(fabric, copy.deepcopy(model), data))


def _compare(model, **plan):
    """Trains every client one at a time and vectorized; returns the vectorized trainer."""
    L.seed_everything(0, verbose=False)
    sequential, vectorized = _pair(model)
    params, buffers = sequential.flat.params.clone(), sequential.flat.buffers.clone()
    jobs = [TrainingJob(ClientPlan(c, 1, seed=100 + c, **plan), params, buffers) for c in range(12)]
    sizes = [sequential.data.client_size(c) for c in range(12)]
    assert len(set(sizes)) > 6 and any(size % 10 for size in sizes)  # ragged, with partial batches
    expected = []
    for job in jobs:  # each update's delta read before the next client trains
        update = sequential.train(job.plan, job.params, job.buffers)
        expected.append((update.delta.clone(), float(update.train_loss), update.num_steps))
    updates: dict[int, object] = {}
    vectorized.train(jobs, lambda lane, index, update: updates.__setitem__(index, update))
    for k, (delta, loss, steps) in enumerate(expected):
        update = updates[k]
        assert update.num_steps == steps  # type: ignore[attr-defined]
        assert float((update.delta - delta).abs().max() / delta.abs().max()) <= 1e-5  # type: ignore[attr-defined]
        assert update.train_loss.item() == pytest.approx(loss, rel=1e-5)  # type: ignore[attr-defined]
    assert vectorized.logged().compute() == pytest.approx(sequential.logged.compute(), rel=1e-5)
    return vectorized


@pytest.mark.parametrize("plan", [{"epochs": 2}, {"steps": 5}], ids=["epochs", "steps"])
def test_a_users_own_module_trains_folded_as_one_at_a_time(plan, monkeypatch):
    calls = []
    original = StackedLoss.folded_loss
    monkeypatch.setattr(StackedLoss, "folded_loss", lambda self, *a: calls.append(a[3]) or original(self, *a))
    vectorized = _compare(Plain(), **plan)
    assert vectorized.loss.prefix and vectorized.loss.fold_checked
    data = vectorized.client.data
    steps = {c: 2 * math.ceil(data.client_size(c) / 10) if "epochs" in plan else 5 for c in range(12)}
    # every client together, one call a step for the clients still training (the first ones), and the check
    assert len(calls) == max(steps.values()) + 1
    assert [len(counts) for counts in calls[1:]] == [sum(n > t for n in steps.values()) for t in range(len(calls) - 1)]
    if "epochs" in plan:  # a straggler that tiers would have trained alone
        assert max(steps.values()) >= 4 * sorted(steps.values())[6]


def test_dropout_masks_are_each_clients_one_at_a_time_masks():
    vectorized = _compare(Plain(dropout=0.3), epochs=1)
    assert vectorized.loss.prefix


@pytest.mark.parametrize(
    "model", [BatchMean, Penalised, Summed, SizeChecked], ids=["batch-mean", "penalty", "sum", "size-checked"]
)
def test_a_step_that_does_not_fold_trains_under_vmap_as_one_at_a_time(model, capsys):
    vectorized = _compare(model(), epochs=1)
    assert not vectorized.loss.prefix
    assert "under vmap" in capsys.readouterr().out


def test_running_statistics_are_not_folded():
    assert may_fold(Plain()) and not may_fold(Plain(norm=True))
    assert not may_fold(nn.Sequential(nn.Conv2d(1, 2, 3)))


def test_the_folded_step_refuses_a_draw_and_a_tensor_that_is_not_folded():
    rows = torch.zeros(2, 3, 4)
    with (
        FoldedStep({id(rows)}, slice(0, 2), torch.tensor([2, 1]), [2, 1], 2, []),
        pytest.raises(NotFolded, match="random"),
    ):
        torch.rand(3)
    with (
        FoldedStep({id(rows)}, slice(0, 2), torch.tensor([2, 1]), [2, 1], 2, []),
        pytest.raises(NotFolded, match="not the folded"),
    ):
        F.linear(torch.zeros(5, 4), rows)
    with (
        FoldedStep({id(rows)}, slice(0, 2), torch.tensor([2, 1]), [2, 1], 2, []),
        pytest.raises(NotFolded, match="rows"),
    ):
        rows.sum()


def test_a_folded_linear_and_loss_are_each_clients_own():
    """By hand: two clients of width 2, the second with one example of its own (its second pads)."""
    weight = torch.tensor([[[1.0, 0.0]], [[0.0, 2.0]]])  # [clients, out 1, in 2]
    x = torch.tensor([[1.0, 5.0], [2.0, 7.0], [3.0, 4.0], [9.0, 9.0]])  # client 0: rows 0-1, client 1: rows 2-3
    with FoldedStep({id(weight)}, slice(0, 2), torch.tensor([2, 1]), [2, 1], 2, []):
        out = F.linear(x, weight)
        logits = torch.cat([out, torch.zeros_like(out)], dim=1)  # two classes: [out, 0]
        loss = F.cross_entropy(logits, torch.tensor([0, 0, 1, 0]))
    assert out.flatten().tolist() == [1.0, 2.0, 8.0, 18.0]
    expected0 = (F.softplus(torch.tensor(-1.0)) + F.softplus(torch.tensor(-2.0))) / 2
    expected1 = F.softplus(torch.tensor(8.0))  # only its own example: target 1, logits (8, 0)
    assert torch.allclose(loss, torch.stack([expected0, expected1]))
