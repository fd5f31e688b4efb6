"""The round engine on tiny fakes (no trainer, no model): a round's updates through each server path, the lanes'
sums added in a fixed order, the round's bookkeeping."""

import torch

from lightfed.strategies import FedAvg, FedBuff, TrimmedMean
from tests.run.fake_training import engine_round

PARAMS = torch.tensor([1.0, 2.0])
DELTAS = [[1.0, 0.0], [0.0, 3.0], [2.0, -1.0], [100.0, 100.0], [-1.0, 1.0]]


def test_the_sums_path_gives_the_example_weighted_mean_and_the_rounds_counts():
    result = engine_round(FedAvg(), PARAMS, DELTAS[:3], examples=[1, 2, 1])
    mean = (torch.tensor([1.0, 0.0]) * 1 + torch.tensor([0.0, 3.0]) * 2 + torch.tensor([2.0, -1.0]) * 1) / 4
    assert torch.allclose(result.params, PARAMS + mean)
    assert result.metrics["round/clients"] == 3.0 and not result.stop


def test_lanes_change_no_bit_of_the_result():
    one = engine_round(FedAvg(), PARAMS, DELTAS, examples=[3, 1, 4, 1, 5])
    three = engine_round(FedAvg(), PARAMS, DELTAS, examples=[3, 1, 4, 1, 5], lanes=3)
    assert torch.equal(one.params, three.params)


def test_the_sharded_path_gives_the_coordinatewise_trimmed_mean():
    """trim 0.2 of 5 clients drops the lowest and the highest value of each coordinate and averages the other three:
    x: 1, 0, 2, 100, -1 -> mean(0, 1, 2) = 1; y: 0, 3, -1, 100, 1 -> mean(0, 1, 3) = 4 / 3."""
    result = engine_round(TrimmedMean(trim=0.2), PARAMS, DELTAS)
    assert torch.allclose(result.params, PARAMS + torch.tensor([1.0, 4.0 / 3.0]))


def test_the_asynchronous_path_weights_each_delta_by_its_staleness():
    """FedBuff with staleness weighting: (1/S) sum_i delta_i / sqrt(1 + s_i); stalenesses 0 and 3 weigh 1 and 1/2."""
    result = engine_round(FedBuff(staleness_weighting=True), PARAMS, DELTAS[:2], staleness=[0, 3])
    expected = (torch.tensor([1.0, 0.0]) * 1.0 + torch.tensor([0.0, 3.0]) * 0.5) / 2
    assert torch.allclose(result.params, PARAMS + expected)
