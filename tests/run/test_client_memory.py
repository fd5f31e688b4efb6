"""A vectorized client's bytes: its weights' copies and the activations its step keeps for the backward pass, which
size the chunks of clients trained together."""

import lightning as L
import torch
from lightning.fabric import Fabric

from lightfed.data import Digits, DirichletPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.models import MLP
from lightfed.models.batchnorm_cnn import SmallBNCNN
from lightfed.privacy import DPSGD
from lightfed.run import client_memory
from lightfed.run.client import ClientTrainer
from lightfed.run.client_memory import EXAMPLE_COPIES, WEIGHT_COPIES, client_bytes
from lightfed.run.vectorized_clients import VectorizedClients
from tests.run.test_vectorized_trainer_view import VNet, _fit, _one_at_a_time


def _client(model, batch_size):
    data = FederatedDataModule(Digits(), DirichletPartitioner(8, alpha=0.5), batch_size=batch_size)
    data.setup(seed=0, device=torch.device("cpu"))
    return ClientTrainer(Fabric(accelerator="cpu", devices=1), model, data)


def test_the_activations_kept_for_the_backward_pass_grow_with_the_batch():
    L.seed_everything(0, verbose=False)
    weights = WEIGHT_COPIES * 4 * (64 * 512 + 512 + 512 * 10 + 10)
    kept = [client_bytes(_client(MLP(64, 10, hidden=[512]), size)) - weights for size in (8, 16, 32)]
    # every activation (the 64 inputs, 512 hidden units, 10 logits a row) is kept at least once per example
    assert kept[0] >= 8 * 4 * (64 + 512 + 10)
    assert kept[2] - kept[1] == 2 * (kept[1] - kept[0]) > 0  # linear in the batch, besides the weights a layer keeps


def test_dp_sgd_adds_a_row_of_the_weights_its_gradient_and_its_clipped_copy_per_example():
    L.seed_everything(0, verbose=False)
    plain = _client(MLP(64, 10, hidden=[32]), 16)
    private = ClientTrainer(plain.fabric, MLP(64, 10, hidden=[32]), plain.data, privacy=DPSGD(noise_multiplier=1.0))
    d = 64 * 32 + 32 + 32 * 10 + 10
    assert client_bytes(private) - client_bytes(plain) == EXAMPLE_COPIES * 16 * d * 4


def test_measuring_moves_no_running_statistic_and_keeps_the_training_mode():
    L.seed_everything(0, verbose=False)
    client = _client(SmallBNCNN(num_classes=10, width=8), 16)
    before = client.flat.buffers.clone()
    client.module.train()
    client_bytes(client)
    assert torch.equal(client.flat.buffers, before) and client.module.training


def test_a_chunk_holds_as_many_clients_as_the_budget_allows(monkeypatch):
    L.seed_everything(0, verbose=False)
    client = _client(MLP(64, 10, hidden=[512]), 32)
    per_client = client_bytes(client)
    monkeypatch.setattr(client_memory, "MAX_CHUNK_BYTES", 10 * per_client + 1)
    assert VectorizedClients(client).chunk == 10 and VectorizedClients(client, auto=True).block == 10


class _RunningMeanMLP(MLP):
    """Subtracts a running mean of its inputs, updated in place by ``training_step``, and records what its trainer
    says there."""

    def __init__(self) -> None:
        super().__init__(64, 10, hidden=[16])
        self.register_buffer("mean", torch.zeros(64))
        self.seen: list[tuple] = []

    def training_step(self, batch, batch_idx):
        x, y = batch[0].flatten(1), batch[1]
        self.seen.append((self.trainer.training, self.trainer.client_id, self.trainer.round, self.global_step))
        self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        with torch.no_grad():
            next(self.parameters()).mul_(2.0)  # a parameter changed in place, too
        return super().training_step((x - self.mean, y), batch_idx)


def test_measuring_leaves_every_parameter_and_buffer_as_it_was_and_shows_client_0s_first_step():
    L.seed_everything(0, verbose=False)
    client = _client(_RunningMeanMLP(), 16)
    before = [t.clone() for t in (*client.module.parameters(), *client.module.buffers())]
    client_bytes(client)
    after = [*client.module.parameters(), *client.module.buffers()]
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))
    assert client.module.seen == [(True, 0, 0, 0)]
    assert client.view.client_id is None and not client.view.training  # the view left as it was found


class _RunningMeanNet(VNet):
    """A 60-64-10 MLP subtracting a running mean of its inputs that ``training_step`` updates in place."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(60))

    def training_step(self, batch, batch_idx):
        self.mean.mul_(0.9).add_(0.1 * batch[0].mean(0))
        return self.loss(batch, batch[0] - self.mean)


def test_the_estimate_before_a_run_leaves_the_starting_model_as_one_at_a_time_starts_it(tmp_path):
    auto = _fit(tmp_path / "auto", _RunningMeanNet(), rounds=1)
    assert isinstance(auto.workers, VectorizedClients)
    one = _one_at_a_time(tmp_path / "one", _RunningMeanNet(), rounds=1)
    assert float((auto.params - one).abs().max() / one.abs().max()) <= 1e-5
