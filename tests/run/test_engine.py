"""The round engine on tiny fakes (no trainer, no model): a round's updates through each server path, the lanes'
sums added in a fixed order, the round's bookkeeping."""

import torch

from lightfed.attacks import SignFlipping
from lightfed.strategies import FedAvg, FedAvgM, FedBuff, FedExP, FedNova, FedProx, Scaffold, TrimmedMean
from lightfed.transforms import NormBounding
from tests.run.fake_training import GivenDeltas, engine_round

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


def rows_round(strategy, transforms=(), examples=(3, 1, 4, 1, 5)):
    """A round whose clients are handed over as rows where the engine takes them, and its training."""
    training = GivenDeltas([torch.tensor(d) for d in DELTAS], list(examples), as_rows=True)
    return engine_round(strategy, PARAMS, DELTAS, transforms, training=training), training


def test_rows_give_what_one_update_at_a_time_gives():
    """FedAvg's example-weighted mean, the round's counts (clients' losses 0..4: mean 2) and the bytes sent (each
    client: 2 float32 values and 4 counts of 4 bytes, 24 bytes), whether the updates come as rows or one by one."""
    alone = engine_round(FedAvg(), PARAMS, DELTAS, examples=[3, 1, 4, 1, 5])
    together, training = rows_round(FedAvg())
    assert training.offered_rows and training.trained == [0, 1, 2, 3, 4]
    weights = torch.tensor([3.0, 1.0, 4.0, 1.0, 5.0])
    mean = (weights @ torch.tensor(DELTAS)) / weights.sum()
    for result in (alone, together):
        assert torch.allclose(result.params, PARAMS + mean)
        assert result.metrics["round/clients"] == 5.0 and result.metrics["round/client_train_loss"] == 2.0
        assert result.metrics["communication/sent_bytes"] == 5 * 24
    assert torch.equal(alone.params, together.params)


def test_rows_only_where_nothing_sees_each_update():
    """No rows for a strategy that adds more than FedAvg's sums (FedNova, a subclass overriding accumulate), a
    transform that changes updates, or an attack with a malicious client in the round; rows without one."""
    assert rows_round(FedProx())[1].offered_rows  # inherits FedAvg's accumulate and its rows
    assert not rows_round(FedNova())[1].offered_rows
    assert not rows_round(FedAvg(), [NormBounding(max_norm=1.0)])[1].offered_rows
    attack, harmless = SignFlipping(fraction=0.2), SignFlipping(fraction=0.0)
    attack.draw(len(DELTAS), seed=0)  # one of the round's five clients is malicious
    harmless.draw(len(DELTAS), seed=0)
    assert len(attack.malicious) == 1 and not rows_round(FedAvg(), [attack])[1].offered_rows
    assert rows_round(FedAvg(), [harmless])[1].offered_rows


def test_a_subclass_that_changes_what_one_client_adds_does_not_inherit_rows():
    class Counting(FedAvg):
        def accumulate(self, sums, update):
            super().accumulate(sums, update)

    class Steps(FedAvg):
        def client_weight(self, update):
            return float(update.num_steps)

    assert FedAvg().takes_rows and FedAvgM().takes_rows and not Counting().takes_rows and not Steps().takes_rows
    assert not Scaffold().takes_rows and not FedExP().takes_rows
