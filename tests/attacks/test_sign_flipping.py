"""lightfed.attacks.sign_flipping: a malicious client's update negated and scaled, a benign one's untouched."""

import pytest
import torch

from lightfed.attacks import SignFlipping
from lightfed.core.messages import ClientPlan
from tests.attacks.conftest import attacked


@pytest.mark.parametrize(
    ("attack", "expected"),
    [(SignFlipping(0.3), lambda d: -d), (SignFlipping(0.3, scale=4.0), lambda d: -4 * d)],
)
def test_sign_flipping_negates_and_scales_only_malicious_updates(attack, expected):
    attack, bad, good = attacked(attack)
    delta = torch.tensor([1.0, -2.0, 0.25])
    poisoned, untouched = delta.clone(), delta.clone()
    attack.update(poisoned, ClientPlan(bad, 0, seed=1))
    attack.update(untouched, ClientPlan(good, 0, seed=1))
    assert torch.equal(poisoned, expected(delta)) and torch.equal(untouched, delta)


def test_sign_flipping_by_hand_in_place():
    """-0.5 x (2, -4, 0.75, 0) = (-1, 2, -0.375, -0), written into the client's own delta."""
    attack, bad, _ = attacked(SignFlipping(0.5, scale=0.5), num_clients=4)
    delta = torch.tensor([2.0, -4.0, 0.75, 0.0])
    storage = delta.data_ptr()
    attack.update(delta, ClientPlan(bad, 3, seed=0))
    assert delta.tolist() == [-1.0, 2.0, -0.375, 0.0] and delta.data_ptr() == storage
