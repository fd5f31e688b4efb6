import math

import numpy as np
import pytest
import torch

from lightfed.audit import Canaries
from lightfed.core.server_context import ServerContext
from lightfed.core.sums import DELTA, WEIGHT, Sums
from lightfed.core.transforms import TransformContext
from lightfed.errors import ConfigError


def set_up(canaries: Canaries, dim: int = 8, rounds: int = 2) -> Canaries:
    server = ServerContext(torch.zeros(dim), num_clients=10, clients_per_round=5, rounds=rounds, seed=1)
    canaries.setup(TransformContext(server, {DELTA: dim, WEIGHT: 1}))
    return canaries


def round_sums(dim: int, weight: float) -> Sums:
    sums = Sums({DELTA: dim, WEIGHT: 1}, torch.device("cpu"))
    sums[WEIGHT].fill_(weight)
    return sums


def test_drawn_canaries_add_their_directions_at_the_norm():
    canaries = set_up(Canaries(count=3, unobserved=2, norm=0.5, sample_rate=1.0))
    assert torch.allclose(torch.linalg.vector_norm(canaries.directions, dim=1), torch.ones(5, dtype=torch.float64))
    sums = round_sums(8, weight=4.0)  # UserLevelDP's fixed denominator: untouched
    canaries.recovered(sums, 0)
    assert torch.allclose(sums[DELTA], 0.5 * canaries.directions[:3].sum(dim=0))
    assert float(sums[WEIGHT]) == 4.0
    assert torch.allclose(canaries.total, sums[DELTA] / 4.0)
    assert canaries.metrics() == {}  # the estimate comes after the last round


def test_with_a_weight_a_canary_counts_as_a_client_of_that_size():
    canaries = set_up(Canaries(count=2, unobserved=2, sample_rate=1.0, weight=3.0))
    sums = round_sums(8, weight=10.0)
    canaries.recovered(sums, 0)
    assert torch.allclose(sums[DELTA], 3.0 * canaries.directions[:2].sum(dim=0))
    assert float(sums[WEIGHT]) == 16.0


def test_the_estimate_after_the_last_round_sees_canaries_alone_as_members():
    # no client and no noise: the model's change is the canaries' sum, whose cosine with each is 1/sqrt(3) (nearly
    # orthogonal directions in 4000 dimensions), against cosines near 0 for the unobserved ones
    canaries = set_up(Canaries(count=3, unobserved=40, sample_rate=1.0, resamples=20), dim=4000, rounds=1)
    canaries.recovered(round_sums(4000, weight=1.0), 0)
    metrics = canaries.metrics()
    assert metrics["cosine_mean"] == pytest.approx(1 / math.sqrt(3), abs=0.02)
    assert abs(metrics["null_mean"]) < 0.01 and metrics["null_std"] == pytest.approx(1 / math.sqrt(4000), rel=0.3)
    assert metrics["epsilon_estimate"] > 20 and metrics["observed"] == 3


def test_insertions_follow_the_sample_rate_and_the_state_resumes():
    canaries = set_up(Canaries(count=2000, unobserved=2, sample_rate=0.25), rounds=5)
    assert abs(canaries.inserted(0).mean() - 0.25) < 0.03
    assert not np.array_equal(canaries.inserted(0), canaries.inserted(1))
    canaries.recovered(round_sums(8, 1.0), 0)
    again = set_up(Canaries(count=2000, unobserved=2, sample_rate=0.25), rounds=5)
    again.load_state_dict(canaries.state_dict())
    assert torch.equal(again.total, canaries.total) and np.array_equal(again.times, canaries.times)


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="count must be >= 2"):
        Canaries(count=1)
    with pytest.raises(ConfigError, match="null must be"):
        Canaries(null="empirical")  # type: ignore[arg-type]
