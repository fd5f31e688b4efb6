"""lightfed.attacks.base: the malicious set drawn from the seed, the (inputs, labels) check, and an attack that
changes only its malicious clients' batches and updates."""

import pytest
import torch

from lightfed.attacks import Attack, SignFlipping, malicious_clients
from lightfed.attacks.base import labelled
from lightfed.core.messages import ClientPlan
from lightfed.errors import ConfigError


def test_the_malicious_set_has_the_configured_size_and_depends_only_on_the_seed():
    assert len(malicious_clients(20, 0.3, 7)) == 6 and malicious_clients(20, 0.3, 7) == malicious_clients(20, 0.3, 7)
    assert malicious_clients(20, 0.3, 7) != malicious_clients(20, 0.3, 8)
    assert malicious_clients(20, 0.0, 7) == frozenset() and malicious_clients(10, 1.0, 0) == frozenset(range(10))
    assert malicious_clients(20, 0.1, 7) <= set(range(20)) and len(malicious_clients(20, 0.1, 7)) == 2
    with pytest.raises(ConfigError, match=r"trainer.attack.fraction must be in \[0, 1\], got 1.5"):
        SignFlipping(1.5)


def test_the_fraction_bounds_are_inclusive_and_a_negative_fraction_is_refused():
    assert Attack(0.0).fraction == 0.0 and Attack(1.0).fraction == 1.0
    with pytest.raises(ConfigError, match=r"trainer.attack.fraction must be in \[0, 1\], got -0.1"):
        Attack(-0.1)


def test_setup_draws_the_malicious_set_of_the_run_seed_and_is_malicious_reads_it():
    attack = Attack(0.4)
    assert attack.malicious == frozenset() and not attack.is_malicious(0)  # nobody before setup
    attack.draw(10, 3)
    assert attack.malicious == malicious_clients(10, 0.4, 3) and len(attack.malicious) == 4
    assert all(attack.is_malicious(c) == (c in attack.malicious) for c in range(10))
    assert attack.callbacks() == []


class _Records(Attack):
    """Doubles a malicious client's update and tags its batches, recording every call."""

    def __init__(self) -> None:
        super().__init__(0.5)
        self.poisoned_batches: list[object] = []
        self.poisoned_plans: list[ClientPlan] = []

    def poison_batch(self, batch):
        self.poisoned_batches.append(batch)
        return ("poisoned", batch)

    def poison_update(self, delta, plan):
        self.poisoned_plans.append(plan)
        delta.mul_(2.0)


def test_only_malicious_clients_go_through_poison_batch_and_poison_update():
    attack = _Records()
    attack.malicious = frozenset({1})
    batches = iter(["a", "b"])
    assert attack.batches(batches, ClientPlan(0, 0, seed=0)) is batches  # a benign client's own iterator, untouched
    assert list(attack.batches(iter(["a", "b"]), ClientPlan(1, 0, seed=0))) == [("poisoned", "a"), ("poisoned", "b")]
    assert attack.poisoned_batches == ["a", "b"]
    benign, malicious = torch.tensor([1.0, -3.0]), torch.tensor([1.0, -3.0])
    attack.update(benign, ClientPlan(0, 2, seed=9))
    attack.update(malicious, ClientPlan(1, 2, seed=9))
    assert torch.equal(benign, torch.tensor([1.0, -3.0])) and torch.equal(malicious, torch.tensor([2.0, -6.0]))
    assert attack.poisoned_plans == [ClientPlan(1, 2, seed=9)]


def test_the_default_poisoning_changes_nothing():
    attack = Attack(1.0)
    attack.draw(3, 0)
    batch, delta = (torch.zeros(2, 3), torch.tensor([0, 1])), torch.tensor([0.5, -1.0])
    (seen,) = attack.batches(iter([batch]), ClientPlan(2, 0, seed=0))
    attack.update(delta, ClientPlan(2, 0, seed=0))
    assert seen is batch and torch.equal(delta, torch.tensor([0.5, -1.0]))


def test_labelled_returns_the_inputs_and_labels_of_a_pair_and_refuses_anything_else():
    x, y = torch.zeros(2, 3), torch.tensor([1, 0])
    assert labelled((x, y), "Mine") == (x, y) and labelled([x, y], "Mine") == (x, y)
    for batch, kind in [({"x": x}, "dict"), ((x, y, y), "tuple"), ((x, [1, 0]), "tuple"), (x, "Tensor")]:
        with pytest.raises(ConfigError, match=f"trainer.attack Mine needs \\(inputs, labels\\) batches, got {kind}"):
            labelled(batch, "Mine")
