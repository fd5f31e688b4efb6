import warnings
from functools import partial

import lightning as L
import torch
from opacus import PrivacyEngine

from lightfed.models import MLP
from lightfed.privacy import DPSGD
from lightfed.strategies import FedAvg
from tests.conftest import small_data, small_trainer


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
