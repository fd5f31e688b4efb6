"""lightfed.attacks.min_max: the known updates' mean pushed along a perturbation p as far as keeps it within the
known updates' largest pairwise distance of each of them."""

import math

import pytest
import torch

from lightfed.attacks import MinMax
from lightfed.errors import ConfigError
from tests.attacks.conftest import KNOWN


@pytest.mark.parametrize("perturbation", ["unit_vec", "std", "sign"])
def test_min_max_stays_within_the_largest_benign_distance_and_goes_as_far_as_that_allows(perturbation):
    attack = MinMax(0.3, perturbation=perturbation)
    crafted = attack.collude(KNOWN, torch.tensor([True, False, True, False]), clients=10)
    assert crafted.shape == (2, 3) and torch.equal(crafted[0], crafted[1])
    bound = torch.cdist(KNOWN.double(), KNOWN.double()).max()
    assert (KNOWN.double() - crafted[0].double()).norm(dim=1).max() <= bound + 1e-5
    p = attack.direction(KNOWN).double()
    gamma = attack.gamma(KNOWN, p)
    further = KNOWN.double().mean(0) - (gamma + 1e-3) * p
    assert gamma > 0 and (KNOWN.double() - further).norm(dim=1).max() > bound


# Two known updates u1 = (0, 0), u2 = (4, 2): mu = (2, 1), population std (2, 1), largest distance sqrt(20). Along
# p = mu / ||mu|| or p = std (both parallel to mu) the farthest known update is u2, at (||mu|| + gamma ||p||): gamma
# ||p|| = sqrt(5), the crafted update is the origin. Along p = sign(mu) = (1, 1): (2 + g)^2 + (1 + g)^2 = 20, i.e.
# 2 g^2 + 6 g - 15 = 0, g = (-3 + sqrt(39)) / 2.
TWO = torch.tensor([[0.0, 0.0], [4.0, 2.0]])
SIGN_GAMMA = (-3 + math.sqrt(39)) / 2


@pytest.mark.parametrize(
    ("perturbation", "p", "gamma", "crafted"),
    [
        ("unit_vec", [2 / math.sqrt(5), 1 / math.sqrt(5)], math.sqrt(5), [0.0, 0.0]),
        ("std", [2.0, 1.0], 1.0, [0.0, 0.0]),
        ("sign", [1.0, 1.0], SIGN_GAMMA, [2 - SIGN_GAMMA, 1 - SIGN_GAMMA]),
    ],
)
def test_min_max_by_hand(perturbation, p, gamma, crafted):
    attack = MinMax(0.5, perturbation=perturbation)
    direction = attack.direction(TWO)
    torch.testing.assert_close(direction, torch.tensor(p))
    found = attack.gamma(TWO, direction)
    assert gamma - 1e-4 < found <= gamma + 1e-9  # the search keeps only gammas within the bound, to its tolerance
    result = attack.collude(TWO, torch.tensor([True, False]), clients=5)
    assert result.shape == (1, 2) and result.dtype == torch.float32
    torch.testing.assert_close(result[0], torch.tensor(crafted), rtol=0, atol=2e-4)
    assert float(torch.cdist(TWO.double(), result.double()).max()) <= math.sqrt(20) + 1e-9


def test_an_unknown_perturbation_is_refused():
    with pytest.raises(ConfigError, match="trainer.attack.perturbation must be one of unit_vec, std, sign, got 'l2'"):
        MinMax(0.3, perturbation="l2")
