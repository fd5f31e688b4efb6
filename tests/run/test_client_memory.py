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
