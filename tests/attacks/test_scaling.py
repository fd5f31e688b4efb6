"""lightfed.attacks.scaling: a malicious client's update multiplied by the factor, a benign one's untouched."""

import torch

from lightfed.attacks import Scaling
from lightfed.core.messages import ClientPlan
from tests.attacks.conftest import attacked


def test_scaling_scales_only_malicious_updates():
    attack, bad, good = attacked(Scaling(0.3, factor=10.0))
    delta = torch.tensor([1.0, -2.0, 0.25])
    poisoned, untouched = delta.clone(), delta.clone()
    attack.update(poisoned, ClientPlan(bad, 0, seed=1))
    attack.update(untouched, ClientPlan(good, 0, seed=1))
    assert torch.equal(poisoned, 10 * delta) and torch.equal(untouched, delta)


def test_scaling_by_hand_in_place_and_its_default_factor_is_ten():
    assert Scaling(0.1).factor == 10.0
    attack, bad, _ = attacked(Scaling(0.5, factor=-2.5), num_clients=4)
    delta = torch.tensor([2.0, -4.0, 0.5])
    storage = delta.data_ptr()
    attack.update(delta, ClientPlan(bad, 0, seed=0))
    assert delta.tolist() == [-5.0, 10.0, -1.25] and delta.data_ptr() == storage
