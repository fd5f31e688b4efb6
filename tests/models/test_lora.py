"""LoRA adapters federated alone: the flat vector holds exactly the adapters, the frozen base ends bit-identical and
is held once per process, and FFA-LoRA (A frozen) makes FedAvg over the adapters the exact mean of the clients'."""

import pytest
import torch

from lightfed.adapters import copy_without_trainer
from lightfed.callbacks import Callback
from lightfed.core.flat import FlatModule
from lightfed.core.messages import ClientUpdate
from lightfed.data import MarkovText, NaturalIdPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.models import LoRA
from lightfed.strategies import FedAvg
from tests.conftest import small_trainer
from tests.models.tiny_transformers import causal_lm


def test_the_mean_of_products_is_the_product_of_means_only_with_a_shared_a():
    """The algebra FFA-LoRA rests on: mean_i(B_i A_i) != mean(B_i) mean(A_i) in general; = mean(B_i) A for one A."""
    g = torch.Generator().manual_seed(0)
    A = [torch.randn(2, 5, generator=g, dtype=torch.float64) for _ in range(3)]
    B = [torch.randn(4, 2, generator=g, dtype=torch.float64) for _ in range(3)]
    exact = sum(b @ a for a, b in zip(A, B, strict=True)) / 3
    averaged = (sum(B) / 3) @ (sum(A) / 3)
    assert (exact - averaged).abs().max() > 0.1  # plain FedAvg over A and B is not the mean update
    shared = sum(b @ A[0] for b in B) / 3
    torch.testing.assert_close((sum(B) / 3) @ A[0], shared, rtol=1e-12, atol=1e-12)


def adapters(model: torch.nn.Module, part: str) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if f".{part}." in name)


def test_the_flat_vector_holds_exactly_the_adapters_and_ffa_lora_only_b():
    model = causal_lm(lora=LoRA(r=2, alpha=4, target_modules=["q_proj", "v_proj"]))
    # q: A 2 x 16, B 16 x 2; v: A 2 x 16, B 8 x 2 (one key-value head of 8): 64 + 32 + 32 + 16
    assert adapters(model, "lora_A") == 64 and adapters(model, "lora_B") == 48
    assert FlatModule(model, torch.device("cpu")).params.numel() == 112
    ffa = causal_lm(lora=LoRA(r=2, alpha=4, target_modules=["q_proj", "v_proj"], train_a=False))
    assert FlatModule(ffa, torch.device("cpu")).params.numel() == 48
    assert sum(p.numel() for p in ffa.parameters()) > 40 * 48  # the frozen base


def test_copies_for_parallel_clients_share_the_frozen_base():
    model = causal_lm(lora=LoRA(r=2, alpha=4))
    copy = copy_without_trainer(model)
    pairs = list(zip(model.parameters(), copy.parameters(), strict=True))
    assert all(p is q for p, q in pairs if not p.requires_grad)
    assert all(p is not q and torch.equal(p, q) for p, q in pairs if p.requires_grad)


class KeptUpdates(Callback):
    def __init__(self) -> None:
        self.updates: list[tuple[int, torch.Tensor]] = []  # (examples, delta)

    def on_client_end(self, trainer, update: ClientUpdate) -> None:
        self.updates.append((update.num_examples, update.delta.clone()))  # the client reuses its delta


def markov_data() -> FederatedDataModule:
    source = MarkovText(num_writers=6, seq_len=8, windows_per_writer=8)
    return FederatedDataModule(source, NaturalIdPartitioner(), batch_size=4)


def test_a_round_of_ffa_lora_gives_the_exact_mean_of_the_clients_adapter_products(tmp_path):
    """FedAvg over B with A shared: the global B A is the example-weighted mean of the clients' B_i A, to rounding;
    the frozen base and A end bit-identical to a fresh build from the seed."""
    lora = LoRA(r=2, alpha=4, target_modules=["q_proj"], train_a=False)
    model, data, kept = causal_lm(lora=lora), markov_data(), KeptUpdates()
    trainer = small_trainer(tmp_path, rounds=1, clients_per_round=3, local_steps=3, callbacks=[kept])
    trainer.fit(model, data, FedAvg())
    updates = kept.updates
    fresh = causal_lm(lora=lora)
    for (name, p), q in zip(model.named_parameters(), fresh.parameters(), strict=True):
        if not p.requires_grad:
            assert torch.equal(p, q), name  # the base and A, bit for bit
    start = FlatModule(fresh, torch.device("cpu")).params
    A = dict(fresh.named_parameters())["net.base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"]
    weights = torch.tensor([examples for examples, _ in updates], dtype=torch.float64)
    products = [(start + delta).double().view(16, 2) @ A.double() for _, delta in updates]
    assert len(updates) == 3 and len({float(p.abs().sum()) for p in products}) == 3
    mean_product = sum(w * p for w, p in zip(weights, products, strict=True)) / weights.sum()
    torch.testing.assert_close(trainer.params.double().view(16, 2) @ A.double(), mean_product, rtol=1e-5, atol=1e-7)


def test_trained_parameters_freeze_the_rest_and_a_pattern_matching_nothing_is_refused(tmp_path):
    model, data = causal_lm(), markov_data()
    trainer = small_trainer(tmp_path, rounds=1, trained_parameters=["net.lm_head.*"])
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer.fit(model, data, FedAvg())
    assert trainer.params.numel() == 16 * 16  # the head alone
    for name, p in model.named_parameters():
        assert p.requires_grad == name.startswith("net.lm_head.")
        assert torch.equal(p, before[name]) != p.requires_grad, name
    with pytest.raises(ConfigError, match=r"trainer.trained_parameters \['nothing.\*'\] match no trainable"):
        small_trainer(tmp_path, rounds=1, trained_parameters=["nothing.*"]).fit(causal_lm(), data, FedAvg())


def test_a_resume_on_another_frozen_base_is_refused(tmp_path):
    lora, data = LoRA(r=2, alpha=4), markov_data()
    small_trainer(tmp_path, rounds=1, version=0).fit(causal_lm(0, lora), data, FedAvg())
    with pytest.raises(ConfigError, match="model.frozen_weights"):
        small_trainer(tmp_path, rounds=2, version=0).fit(causal_lm(1, lora), data, FedAvg(), ckpt_path="last")
    small_trainer(tmp_path, rounds=2, version=0).fit(causal_lm(0, lora), data, FedAvg(), ckpt_path="last")
