"""Krum, Multi-Krum, Bulyan, the geometric median (RFA) and centered clipping: hand computations on tiny sets of
vectors, and the same model on one and two processes (distances and norms through the coordinate shards)."""

from pathlib import Path

import pytest
import torch

from lightfed.core.sharding import CoordinateShards
from lightfed.errors import ConfigError
from lightfed.strategies import Bulyan, CenteredClipping, GeometricMedian, Krum, MultiKrum
from lightfed.strategies.base import ServerContext
from lightfed.strategies.bulyan import bulyan_selection, closest_to_median_mean
from lightfed.strategies.geometric_median import weighted_mean
from lightfed.strategies.pairwise_distances import ShardedDistances
from lightfed.strategies.robust import trimmed_mean
from lightfed.strategies.sharded_base import ShardedRound, ShardedStrategy
from tests.conftest import same_weights_on_two_processes, trainer_options

ROOT = Path(__file__).resolve().parents[2]
LINE = torch.tensor([[0.0], [1.0], [2.0], [4.0], [8.0], [50.0], [-60.0]])


def _round(deltas: torch.Tensor, examples: list[float] | None = None) -> ShardedRound:
    ones = torch.ones(len(deltas), dtype=torch.float64)
    weights = ones if examples is None else torch.tensor(examples, dtype=torch.float64)
    return ShardedRound(0, list(range(len(deltas))), deltas, weights, ones, ones, 0 * ones, {}, lambda t, op: t)


def _set_up(strategy: ShardedStrategy, size: int) -> ShardedStrategy:
    strategy.setup(ServerContext(torch.zeros(size), num_clients=10))
    return strategy


def test_pairwise_distances_through_two_shards_are_those_of_one():
    """Each 'process' adds its own coordinates per block; summing the two padded block matrices is the all-reduce."""
    rows = torch.randn(5, 4099, generator=torch.Generator().manual_seed(0))
    whole = ShardedDistances(4099).pairwise(rows)
    assert torch.allclose(whole, torch.cdist(rows.double(), rows.double()).square(), rtol=1e-6)
    assert torch.equal(whole.diagonal(), torch.zeros(5, dtype=torch.float64)) and torch.equal(whole, whole.T)
    shards = [CoordinateShards(4099, 2, rank).local for rank in range(2)]
    seen: list[torch.Tensor] = []
    for shard in shards:  # first pass: what each process contributes
        ShardedDistances(4099, shard, lambda t, op: seen.append(t.clone()) or t).pairwise(rows[:, shard])
    total = seen[0] + seen[1]
    for shard in shards:
        assert torch.equal(ShardedDistances(4099, shard, lambda t, op: total).pairwise(rows[:, shard]), whole)


def test_the_means_over_the_clients_on_any_shard_are_the_whole_vectors_bits():
    """float64 rows, so no cast to float32 hides a last bit: torch's mean over the rows of a slice differs from the
    same columns of the whole (5003 coordinates on 2-4 processes); the means add one row at a time."""
    rows = torch.randn(10, 5003, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    weights = torch.rand(10, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.5
    means = {
        "trimmed": lambda part: trimmed_mean(part, 2),
        "weighted": lambda part: weighted_mean(part, weights),
        "closest to the median": lambda part: closest_to_median_mean(part, 4),
    }
    for name, mean in means.items():
        whole = mean(rows)
        for world in (2, 3, 4):
            bounds = CoordinateShards(5003, world).bounds
            assert torch.equal(torch.cat([mean(rows[:, start:stop]) for start, stop in bounds]), whole), (name, world)
    torch.testing.assert_close(weighted_mean(rows, weights), (weights[:, None] * rows).sum(0) / weights.sum())


def test_krum_and_multi_krum_by_hand():
    """f = 1, n = 5 on a line: each point's 2 nearest squared distances: 0 -> 1+4... scored 0:10, 1:5, 3:13, 7:52."""
    deltas = torch.tensor([[0.0], [1.0], [3.0], [7.0], [100.0]])
    assert torch.equal(_set_up(Krum(num_byzantine=1), 1).aggregate_shard(torch.zeros(1), _round(deltas)), deltas[1])
    two = _set_up(MultiKrum(num_byzantine=1, m=2, server_lr=2.0), 1)
    assert torch.equal(two.aggregate_shard(torch.ones(1), _round(deltas)), torch.tensor([1 + 2 * 0.5]))
    rest = _set_up(MultiKrum(num_byzantine=1), 1)  # m = n - f = 4: the outlier is the one left out
    assert torch.equal(rest.aggregate_shard(torch.zeros(1), _round(deltas)), torch.tensor([11 / 4]))


def test_krum_refuses_too_few_clients_for_its_f():
    with pytest.raises(ConfigError, match=r"Krum needs more than 2f \+ 2 = 6 clients"):
        _set_up(Krum(num_byzantine=2), 1).aggregate_shard(torch.zeros(1), _round(LINE[:6]))


def test_bulyan_selection_and_trim_by_hand():
    """f = 1, n = 7: Krum picks 2 (score 45, tied with 4, lower row), then 4, 1, 0 (tied with 8) and 8, scored among
    the rows left by their max(1, n' - 3) nearest; beta = 3 values closest to the picked median 2: 2, 1 and 4 (tied
    with 0, earlier pick)."""
    distances = ShardedDistances(1).pairwise(LINE)
    assert bulyan_selection(distances, 1) == [2, 3, 1, 0, 4]
    result = _set_up(Bulyan(num_byzantine=1), 1).aggregate_shard(torch.zeros(1), _round(LINE))
    assert torch.equal(result, torch.tensor([7 / 3]))
    # per column: medians 2.5 and 0.5; the two closest rows 1, 2 and 2, 3
    values = torch.tensor([[1.0, 10.0], [2.0, -5.0], [3.0, 0.0], [10.0, 1.0]])
    assert torch.equal(closest_to_median_mean(values, 2), torch.tensor([2.5, 0.5]))
    with pytest.raises(ConfigError, match=r"Bulyan needs at least 4f \+ 3 = 11 clients"):
        _set_up(Bulyan(num_byzantine=2), 1).aggregate_shard(torch.zeros(1), _round(LINE))


def test_weiszfeld_reaches_the_geometric_median_by_hand():
    """On a line the geometric median is the (weighted) median: 1 of {0, 1, 10}; 10 when it weighs 5 of 7."""
    points = torch.tensor([[0.0], [1.0], [10.0]])
    median = _set_up(GeometricMedian(max_iterations=100, nu=1e-9, ftol=0.0, weighted=False), 1)
    assert torch.allclose(median.aggregate_shard(torch.zeros(1), _round(points)), torch.tensor([1.0]), atol=1e-5)
    weighted = _set_up(GeometricMedian(max_iterations=100, nu=1e-9, ftol=0.0), 1)
    result = weighted.aggregate_shard(torch.zeros(1), _round(points, [1.0, 1.0, 5.0]))
    assert torch.allclose(result, torch.tensor([10.0]), atol=1e-5)


def test_weiszfelds_fixed_point_and_its_stopping_rule():
    """Converged, z = sum_i beta_i w_i / sum_i beta_i with beta_i = 1 / ||z - w_i||; a loose ftol stops sooner."""
    points = torch.randn(6, 3, generator=torch.Generator().manual_seed(1)).double()
    strategy = _set_up(GeometricMedian(max_iterations=500, ftol=0.0, weighted=False), 3)
    z = strategy.aggregate_shard(torch.zeros(3, dtype=torch.float64), _round(points))
    beta = 1 / (points - z).norm(dim=1)
    assert torch.allclose(weighted_mean(points, beta), z, atol=1e-9)
    assert strategy.metrics()["weiszfeld_iterations"] == 500
    loose = _set_up(GeometricMedian(max_iterations=500, ftol=1e-2, weighted=False), 3)
    loose.aggregate_shard(torch.zeros(3, dtype=torch.float64), _round(points))
    assert 1 <= loose.metrics()["weiszfeld_iterations"] < 20
    # one iteration from the mean, by hand
    one = _set_up(GeometricMedian(max_iterations=1, weighted=False), 3)
    mean = points.mean(0)
    expected = weighted_mean(points, 1 / (points - mean).norm(dim=1))
    assert torch.allclose(one.aggregate_shard(torch.zeros(3, dtype=torch.float64), _round(points)), expected)


def test_centered_clipping_by_hand_and_its_center_carries_over():
    """Center 0, tau 1: norms 5, 0.5, 0 scale by 0.2, 1, 1 -> mean of (0.6, 0.8), (0, 0.5), (0, 0)."""
    strategy = _set_up(CenteredClipping(tau=1.0), 2)
    deltas = torch.tensor([[3.0, 4.0], [0.0, 0.5], [0.0, 0.0]])
    first = strategy.aggregate_shard(torch.zeros(2), _round(deltas))
    assert torch.allclose(first, torch.tensor([0.2, 1.3 / 3]))
    # round 2: every delta (1, 1) is within tau of the center (0.2, 0.433): the center moves onto it
    second = strategy.aggregate_shard(torch.zeros(2), _round(torch.ones(3, 2)))
    assert torch.allclose(second, torch.ones(2)) and torch.allclose(strategy.sharded_state()["center"], torch.ones(2))
    tight = _set_up(CenteredClipping(tau=0.1), 2).aggregate_shard(torch.zeros(2), _round(deltas))
    assert torch.allclose(tight, torch.tensor([0.06 + 0.0, 0.08 + 0.1]) / 3)  # scales 0.02, 0.2, 1


class RobustCycle(ShardedStrategy):
    """Round r aggregates with the r-th of Krum, Multi-Krum, Bulyan, the geometric median and centered clipping."""

    def __init__(self) -> None:
        self.rules = [Krum(2), MultiKrum(2), Bulyan(1), GeometricMedian(), CenteredClipping(tau=0.5, iterations=2)]

    def setup(self, context: ServerContext) -> None:
        super().setup(context)
        for rule in self.rules:
            rule.setup(context)

    def aggregate_shard(self, params: torch.Tensor, updates: ShardedRound) -> torch.Tensor:
        return self.rules[updates.round % len(self.rules)].aggregate_shard(params, updates)


@pytest.mark.slow
def test_one_and_two_processes_give_the_same_model(tmp_path):
    """Every rule's distances and norms through two processes' coordinate shards: the same final weights, bit for bit
    (and the same on both processes every round: check_replicas)."""

    assert same_weights_on_two_processes(
        tmp_path,
        "--strategy",
        "tests.strategies.test_robust_aggregators.RobustCycle",
        *trainer_options(rounds=5, local_epochs=1, client_eval_interval=0),
    )
