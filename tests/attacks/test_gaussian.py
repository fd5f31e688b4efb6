"""lightfed.attacks.gaussian: a malicious client's update replaced by N(0, std^2 I) noise drawn from its seed."""

import torch

from lightfed.attacks import GaussianUpdates
from lightfed.core.messages import ClientPlan
from tests.attacks.conftest import attacked


def test_gaussian_updates_replace_the_update_with_noise_drawn_from_the_clients_seed():
    attack, bad, _ = attacked(GaussianUpdates(0.3, std=2.0))
    first, second, other = torch.ones(20000), torch.ones(20000), torch.ones(20000)
    attack.update(first, ClientPlan(bad, 0, seed=5))
    attack.update(second, ClientPlan(bad, 0, seed=5))
    attack.update(other, ClientPlan(bad, 1, seed=6))
    assert torch.equal(first, second) and not torch.equal(first, other)
    assert abs(float(first.mean())) < 0.05 and abs(float(first.std()) - 2.0) < 0.05


def test_the_noise_is_std_times_a_standard_normal_draw_of_the_seed_whatever_the_update_was():
    attack, bad, good = attacked(GaussianUpdates(0.3, std=3.0))
    standard = torch.randn(2, 3, generator=torch.Generator().manual_seed(11))
    ones, zeros, benign = torch.ones(2, 3), torch.zeros(2, 3), torch.ones(2, 3)
    attack.update(ones, ClientPlan(bad, 4, seed=11))
    attack.update(zeros, ClientPlan(bad, 4, seed=11))
    attack.update(benign, ClientPlan(good, 4, seed=11))
    assert torch.equal(ones, 3.0 * standard) and torch.equal(zeros, ones) and torch.equal(benign, torch.ones(2, 3))
