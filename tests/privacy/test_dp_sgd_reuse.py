import warnings
from functools import partial

import lightning as L
import pytest
import torch
from opacus import PrivacyEngine

from lightfed.core.messages import ClientPlan
from lightfed.models import MLP
from lightfed.privacy import DPSGD
from lightfed.strategies import FedAvg
from tests.conftest import small_data, small_trainer
from tests.privacy.test_dp_sgd import X, Y, _clipped, _private_client


def _two_rounds_of_three_clients(tmp_path):
    L.seed_everything(0, verbose=False)
    model = MLP(in_features=64, num_classes=10, optimizer=partial(torch.optim.SGD, lr=0.1))
    trainer = small_trainer(tmp_path, rounds=2, clients_per_round=3, local_steps=2, privacy=DPSGD(noise_multiplier=1.0))
    trainer.fit(model, small_data(), FedAvg())


def test_the_model_and_optimizer_are_made_private_once_per_process_and_warn_at_most_once(tmp_path, monkeypatch):
    """2 rounds x 3 clients: no ``make_private`` per client, and torch's backward-hook warning (under Python's default
    filter, as a user sees it) at most once, not once per client and round."""
    calls = []
    make_private = PrivacyEngine.make_private
    monkeypatch.setattr(PrivacyEngine, "make_private", lambda *a, **k: calls.append(1) or make_private(*a, **k))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        _two_rounds_of_three_clients(tmp_path)
    hook_warnings = [w for w in caught if "Full backward hook is firing" in str(w.message)]
    assert len(calls) <= 1
    assert len(hook_warnings) <= 1


def test_a_client_trained_after_another_on_the_same_trainer_gets_what_a_fresh_trainer_gives():
    """Nothing of a client's training (per-example gradients, the accumulated clipped sum, noise settings) leaks
    into the next client's on the reused private module and optimizer."""
    privacy = DPSGD(noise_multiplier=0.7, max_grad_norm=1.0, max_physical_batch_size=1)
    reused = _private_client(X, Y, privacy, batch_size=2)
    reused.train(ClientPlan(client_id=0, round=0, seed=1, steps=3), torch.zeros(3), torch.zeros(0))
    second = ClientPlan(client_id=0, round=1, seed=2, steps=3)
    after_another = reused.train(second, torch.full((3,), 0.1), torch.zeros(0)).delta.clone()
    fresh = _private_client(X, Y, DPSGD(noise_multiplier=0.7, max_grad_norm=1.0, max_physical_batch_size=1), 2)
    assert torch.equal(after_another, fresh.train(second, torch.full((3,), 0.1), torch.zeros(0)).delta)


@pytest.mark.parametrize("mode", ["hooks", "functorch"])
def test_every_per_example_gradient_is_clipped_in_each_per_sample_mode(mode):
    client = _private_client(X, Y, DPSGD(noise_multiplier=0.0, max_grad_norm=1.0, grad_sample_mode=mode))
    w = torch.tensor([0.5, -0.5, 1.0])
    update = client.train(ClientPlan(client_id=0, round=0, seed=0, steps=1), w, torch.zeros(0))
    expected = -_clipped((X @ w - Y.float())[:, None] * X, 1.0).sum(0) / len(Y)  # every example sampled (rate 1)
    assert torch.allclose(update.delta, expected, atol=1e-6)
