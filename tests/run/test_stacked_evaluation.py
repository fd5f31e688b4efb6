"""Per-client evaluation on batched matmuls gives each client's one-at-a-time values: the global model, a personal
model per client, the model fine-tuned on each client (fine-tuned vectorized)."""

import lightning as L
import numpy as np
import pytest
import torch
from lightning.fabric import Fabric

from lightfed.data import Digits, DirichletPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.data.partitioners import Partitioner
from lightfed.models import MLP
from lightfed.run.client import ClientTrainer
from lightfed.run.evaluation import ClientEvaluation, Evaluation
from lightfed.run.stacked_evaluation import stacked_evaluation
from tests.conftest import small_model

CPU = torch.device("cpu")


def _client(model, precision="32-true", val_fraction=0.3, partitioner=None):
    data = FederatedDataModule(
        Digits(), partitioner or DirichletPartitioner(8, alpha=0.5), batch_size=16, client_val_fraction=val_fraction
    )
    data.setup(seed=0, device=CPU)
    return ClientTrainer(Fabric(accelerator="cpu", devices=1, precision=precision), model, data)


def _personal(client_id, params, buffers):
    """A client's own weights: the global ones moved by a draw of its own (none for client 3)."""
    if client_id == 3:
        return None
    return params + 0.05 * torch.randn(params.shape, generator=torch.Generator().manual_seed(client_id)), buffers


@pytest.mark.parametrize("monitor", ["val_loss", "val_acc"])
def test_every_client_gets_its_one_at_a_time_values(monitor):
    L.seed_everything(0, verbose=False)
    client = _client(MLP(64, 10, hidden=[32, 16]))
    settings = ClientEvaluation(personal=_personal, finetune_steps=3)
    stacked, one_at_a_time = Evaluation(client.fabric, client, settings), Evaluation(client.fabric, client, settings)
    one_at_a_time.stacked = one_at_a_time.tuner = None
    assert stacked.stacked is not None and stacked.tuner is not None
    params, buffers = client.flat.params.clone(), client.flat.buffers.clone()
    seen = {0, 1, 2, 3, 4}
    expected = one_at_a_time.clients(0, params, buffers, monitor, seen)
    computed = stacked.clients(0, params, buffers, monitor, seen)
    assert (
        set(computed)
        == set(expected)
        == {
            f"clients/{monitor}",
            f"clients/personal/{monitor}",
            f"clients/finetuned/{monitor}",
            f"clients/unseen/{monitor}",
            f"clients/unseen/finetuned/{monitor}",
        }
    )
    for name, values in expected.items():
        assert computed[name] == pytest.approx(values, rel=1e-5, abs=1e-7), name
    assert len(computed[f"clients/personal/{monitor}"]) == 7  # client 3 has none


class _OneExampleFirst(Partitioner):
    """Client 0 holds one example (so it holds none out), the others the rest in turn."""

    def split(self, labels, seed):
        rest = np.arange(1, len(labels))
        return [np.array([0]), *(rest[k :: self.num_clients - 1] for k in range(self.num_clients - 1))]


def test_a_client_with_nothing_held_out_is_left_out_one_at_a_time_as_on_batched_matmuls():
    L.seed_everything(0, verbose=False)
    client = _client(MLP(64, 10, hidden=[8]), partitioner=_OneExampleFirst(4))
    assert len(client.data.client_val_indices(0)) == 0
    stacked, one_at_a_time = Evaluation(client.fabric, client), Evaluation(client.fabric, client)
    one_at_a_time.stacked = None
    params, buffers = client.flat.params.clone(), client.flat.buffers.clone()
    expected = one_at_a_time.clients(0, params, buffers, "val_acc", seen={0, 1, 2, 3})
    computed = stacked.clients(0, params, buffers, "val_acc", seen={0, 1, 2, 3})
    assert len(expected["clients/val_acc"]) == 3  # clients 1, 2 and 3
    assert computed["clients/val_acc"] == pytest.approx(expected["clients/val_acc"], rel=1e-6)


class _OwnValidation(MLP):
    def validation_step(self, batch, batch_idx):
        return super().validation_step(batch, batch_idx)


class _Hooked(MLP):
    def on_validation_epoch_end(self):
        pass


@pytest.mark.parametrize(
    ("model", "precision", "applies"),
    [
        (lambda: MLP(64, 10, hidden=[8]), "32-true", True),
        (small_model, "32-true", False),  # convolutions
        (lambda: _OwnValidation(64, 10), "32-true", False),
        (lambda: _Hooked(64, 10), "32-true", False),
        (lambda: MLP(64, 10, hidden=[8]), "bf16-mixed", False),
    ],
    ids=["mlp", "cnn", "own-validation-step", "validation-hook", "bf16"],
)
def test_evaluation_on_batched_matmuls_applies_only_where_it_computes_the_same(model, precision, applies):
    assert (stacked_evaluation(_client(model(), precision)) is not None) == applies
