"""NormBounding: each client's delta clipped in L2 before the inner strategy (sums path) adds it."""

import pytest
import torch
import yaml
from jsonargparse import ArgumentParser

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies import FedAdam, FedAvg, FedBuff, NormBounding, Scaffold, Strategy, TrimmedMean
from lightfed.strategies.base import ServerContext
from tests.conftest import small_data, small_model, small_trainer

X = torch.tensor([1.0, 2.0, 3.0])


def _update(client_id, delta, examples=10):
    return ClientUpdate(client_id, torch.tensor(delta), torch.zeros(0), examples, 1, 0.1, torch.tensor(0.0))


def _round(strategy, updates, params=X, round=0):
    sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
    for update in updates:
        strategy.accumulate(sums, update)
    return strategy.aggregate(params, sums, round)


def test_deltas_longer_than_max_norm_are_scaled_to_it_before_fedavg():
    strategy = NormBounding(FedAvg(), max_norm=1.0)
    strategy.setup(ServerContext(X, 2))
    # [3, 4, 0] has norm 5 -> [0.6, 0.8, 0]; [0.3, 0.4, 0] (norm 0.5) is kept; weights 10 and 30 examples
    new = _round(strategy, [_update(0, [3.0, 4.0, 0.0], examples=10), _update(1, [0.3, 0.4, 0.0], examples=30)])
    assert torch.allclose(new, X + torch.tensor([0.375, 0.5, 0.0]))
    assert strategy.metrics() == {"clipped_fraction": 0.5}


def test_a_stateful_inner_strategy_sees_the_bounded_deltas_and_keeps_its_state_across_a_resume():
    wrapped, plain = NormBounding(FedAdam(server_lr=0.1), max_norm=2.0), FedAdam(server_lr=0.1)
    wrapped.setup(ServerContext(X, 2))
    plain.setup(ServerContext(X, 2))
    rounds = [([6.0, 8.0, 0.0], [0.0, 1.0, 0.0]), ([0.0, 0.0, -4.0], [1.0, 1.0, 1.0])]
    bounded = [([1.2, 1.6, 0.0], [0.0, 1.0, 0.0]), ([0.0, 0.0, -2.0], [1.0, 1.0, 1.0])]  # norms 10, 4 -> 2
    x_wrapped = x_plain = X
    for round, (deltas, by_hand) in enumerate(zip(rounds, bounded, strict=False)):
        x_wrapped = _round(wrapped, [_update(i, d) for i, d in enumerate(deltas)], x_wrapped, round)
        x_plain = _round(plain, [_update(i, d) for i, d in enumerate(by_hand)], x_plain, round)
        assert torch.allclose(x_wrapped, x_plain)
    assert torch.allclose(wrapped.inner.m, plain.m) and torch.allclose(wrapped.inner.v, plain.v)
    resumed = NormBounding(FedAdam(server_lr=0.1), max_norm=2.0)
    resumed.setup(ServerContext(X, 2))
    resumed.load_state_dict(wrapped.state_dict())
    assert torch.equal(resumed.inner.m, plain.m) and torch.equal(resumed.inner.v, plain.v)


def test_the_inner_strategy_keeps_its_per_client_store():
    strategy = NormBounding(Scaffold(), max_norm=1.0)
    strategy.setup(ServerContext(X, 4))
    _round(strategy, [_update(0, [3.0, 4.0, 0.0])])
    assert strategy.client_states is strategy.inner.client_states and len(strategy.client_states) == 1
    assert strategy.stores() == {"clients": strategy.inner.client_states}


@pytest.mark.parametrize("inner", [TrimmedMean(), FedBuff()])
def test_a_strategy_off_the_sums_path_is_refused_in_one_line(inner):
    with pytest.raises(ConfigError, match=f"NormBounding wraps a strategy of the sums path .*, not {type(inner).__name__}$"):
        NormBounding(inner, max_norm=1.0)


def test_max_norm_must_be_positive():
    with pytest.raises(ConfigError, match="strategy.max_norm must be > 0, got 0"):
        NormBounding(FedAvg(), max_norm=0)


def test_it_is_configured_from_yaml_with_the_inner_strategy_nested():
    config = """
    strategy:
      class_path: lightfed.strategies.NormBounding
      init_args:
        max_norm: 1.0
        strategy: {class_path: lightfed.strategies.FedAdam, init_args: {server_lr: 0.05}}
    """
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(Strategy, "strategy")
    strategy = parser.instantiate(parser.parse_object(yaml.safe_load(config))).strategy
    assert isinstance(strategy, NormBounding) and strategy.max_norm == 1.0
    assert isinstance(strategy.inner, FedAdam) and strategy.inner.server_lr == 0.05


def test_a_run_with_a_bound_no_delta_reaches_gives_fedavg_weights_bit_for_bit(tmp_path):
    bounded, plain = small_model(), small_model()
    metrics = small_trainer(tmp_path / "a", rounds=2).fit(bounded, small_data(), NormBounding(FedAvg(), max_norm=1e9))
    small_trainer(tmp_path / "b", rounds=2).fit(plain, small_data(), FedAvg())
    assert metrics["strategy/clipped_fraction"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(bounded.parameters(), plain.parameters(), strict=False))
    clipped = small_trainer(tmp_path / "c", rounds=1).fit(small_model(), small_data(), NormBounding(FedAvg(), max_norm=1e-3))
    assert clipped["strategy/clipped_fraction"] == 1.0
