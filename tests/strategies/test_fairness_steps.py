"""q-FedAvg's and agnostic FL's server steps against hand computations and the papers' printed formulas."""

import math

import pytest
import torch

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.local.loss_at_global import LOSS_AT_GLOBAL
from lightfed.strategies import AgnosticFL, QFedAvg
from lightfed.strategies.base import ServerContext
from lightfed.strategies.qfedavg import qfedavg_step
from lightfed.strategies.simplex import project_to_simplex


def _update(client_id: int, delta: list[float], loss: float, examples: int = 10, steps: int = 4) -> ClientUpdate:
    """An update of ``steps`` local steps of size 0.25 (L = 1 / 0.25 = 4) that reports ``loss``."""
    return ClientUpdate(
        client_id, torch.tensor(delta), torch.zeros(0), examples, steps, 0.25 * steps, torch.tensor(0.0),
        {LOSS_AT_GLOBAL: loss},
    )  # fmt: skip


def _aggregate(strategy, params: torch.Tensor, updates: list[ClientUpdate], num_clients: int = 3) -> torch.Tensor:
    strategy.setup(ServerContext(params, num_clients))
    sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
    for update in updates:
        strategy.accumulate(sums, update)
    return strategy.aggregate(params, sums, round=0)


def test_qfedavg_step_by_hand():
    # q = 1, L = 4; client 0: F = 2, delta (1, 0); client 1: F = 0.5, delta (0, -2)
    # Delta_0 = 2 * 4 * (-1, 0) = (-8, 0); h_0 = 1 * 2^0 * 16 * 1 + 4 * 2 = 24
    # Delta_1 = 0.5 * 4 * (0, 2) = (0, 4); h_1 = 1 * 0.5^0 * 16 * 4 + 4 * 0.5 = 66
    # w+ = w - (-8, 4) / 90
    params = torch.tensor([1.0, 1.0], dtype=torch.float64)
    deltas = [torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([0.0, -2.0], dtype=torch.float64)]
    stepped = qfedavg_step(params, deltas, [2.0, 0.5], q=1.0, lipschitz=4.0)
    assert torch.allclose(stepped, torch.tensor([1 + 8 / 90, 1 - 4 / 90], dtype=torch.float64))


@pytest.mark.parametrize("q", [0.5, 1.0, 3.0])
def test_qfedavg_uniform_sums_give_the_printed_step(q):
    params = torch.tensor([0.5, -1.0, 2.0])
    updates = [_update(0, [0.1, 0.2, -0.3], 2.3), _update(1, [-0.4, 0.0, 0.1], 0.7), _update(2, [0.0, 0.3, 0.3], 1.1)]
    got = _aggregate(QFedAvg(q=q, weighting="uniform"), params, updates)
    expected = qfedavg_step(params.double(), [u.delta.double() for u in updates], [2.3, 0.7, 1.1], q, lipschitz=4.0)
    assert torch.allclose(got.double(), expected, atol=1e-6)


def test_qfedavg_example_weights_scale_each_client_by_its_examples():
    # p_k = n_k: the same as the uniform step with client 1 counted 3 times (q = 1, L = 2 given)
    params = torch.zeros(2)
    a, b = _update(0, [1.0, 0.0], 2.0, examples=10), _update(1, [0.0, 1.0], 1.0, examples=30)
    got = _aggregate(QFedAvg(q=1.0, lipschitz=2.0), params, [a, b])
    expected = qfedavg_step(
        params.double(), [a.delta.double()] + [b.delta.double()] * 3, [2.0, 1.0, 1.0, 1.0], 1.0, 2.0
    )
    assert torch.allclose(got.double(), expected, atol=1e-6)


def test_qfedavg_zero_is_fedavg_of_the_same_sums():
    from lightfed.strategies import FedAvg

    params = torch.tensor([0.5, -1.0, 2.0])
    updates = [_update(0, [0.1, 0.2, -0.3], 2.3, 7), _update(1, [-0.4, 0.0, 0.1], 0.7, 13)]
    for weighting in ("examples", "uniform"):
        got = _aggregate(QFedAvg(q=0.0, weighting=weighting), params, updates)
        assert torch.equal(got, _aggregate(FedAvg(weighting=weighting), params, updates))


@pytest.mark.parametrize("settings", [{"q": -0.1}, {"q": math.nan}, {"q": math.inf}, {"lipschitz": 0.0}])
def test_qfedavg_refuses_bad_settings(settings):
    with pytest.raises(ConfigError, match="strategy.q|strategy.lipschitz"):
        QFedAvg(**settings)


def test_simplex_projection_by_hand():
    # v = (0.5, 0.4, -0.3): u sorted = (0.5, 0.4, -0.3); j=1: 0.5 - (0.5-1)/1 > 0; j=2: 0.4 - (0.9-1)/2 = 0.45 > 0;
    # j=3: -0.3 - (0.6-1)/3 < 0 -> rho = 2, theta = (0.9 - 1) / 2 = -0.05: x = (0.55, 0.45, 0) (the last clips to 0)
    x = project_to_simplex(torch.tensor([0.5, 0.4, -0.3], dtype=torch.float64))
    assert torch.allclose(x, torch.tensor([0.55, 0.45, 0.0], dtype=torch.float64))
    inside = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)  # a point of the simplex is its own projection
    assert torch.allclose(project_to_simplex(inside), inside)


def test_agnostic_fl_mixture_and_model_steps_by_hand():
    # N = 3, m = 2 sampled (clients 0 and 2), gamma = 0.5, lambda = (1/3, 1/3, 1/3)
    # g = (3/2) (1.0, 0, 0.2) = (1.5, 0, 0.3); v = lambda + 0.5 g = (1/3 + 0.75, 1/3, 1/3 + 0.15)
    # sorted (1.0833, 0.4833, 0.3333): j=2: 0.4833 - (1.5667-1)/2 = 0.2 > 0; j=3: 0.3333 - (1.9-1)/3 = 0.0333 > 0
    # -> theta = 0.9 / 3 = 0.3: lambda+ = (0.78333, 0.03333, 0.18333)
    params = torch.tensor([1.0, 2.0])
    strategy = AgnosticFL(lambda_lr=0.5)
    updates = [_update(0, [0.3, 0.0], 1.0), _update(2, [0.0, -0.6], 0.2)]
    got = _aggregate(strategy, params, updates)
    # w+ = w + (3/2) (1/3 (0.3, 0) + 1/3 (0, -0.6)) = (1.15, 1.7)
    assert torch.allclose(got, torch.tensor([1.15, 1.7]))
    third = 1 / 3
    expected = torch.tensor([third + 0.75 - 0.3, third - 0.3, third + 0.15 - 0.3], dtype=torch.float64)
    assert torch.allclose(strategy.lam, expected)
    # a second round in which client 1 clips to 0: lambda = (0.78333, 0.03333, 0.18333), only client 0 sampled
    # with loss 0.4: g = 3 (0.4, 0, 0) = (1.2, 0, 0); v = (1.38333, 0.03333, 0.18333); j=2: 0.18333 - (1.56667-1)/2
    # = -0.1 < 0 -> rho = 1, theta = 0.38333: lambda+ = (1, 0, 0)
    sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
    strategy.accumulate(sums, _update(0, [0.0, 0.0], 0.4))
    strategy.aggregate(params, sums, round=1)
    assert torch.allclose(strategy.lam, torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))


def test_agnostic_fl_resumes_its_mixture():
    strategy = AgnosticFL(lambda_lr=0.5)
    _aggregate(strategy, torch.zeros(2), [_update(1, [0.1, 0.1], 2.0)])
    again = AgnosticFL(lambda_lr=0.5)
    again.setup(ServerContext(torch.zeros(2), 3))
    again.load_state_dict(strategy.state_dict())
    assert torch.equal(again.lam, strategy.lam) and not torch.equal(again.lam, torch.full((3,), 1 / 3).double())


@pytest.mark.parametrize("settings", [{"lambda_lr": -1.0}, {"server_lr": 0.0}])
def test_agnostic_fl_refuses_bad_settings(settings):
    with pytest.raises(ConfigError, match="strategy.lambda_lr|strategy.server_lr"):
        AgnosticFL(**settings)


def test_the_clients_losses_are_refused_under_an_accounting_privacy_mechanism():
    from lightfed.privacy import DPSGD
    from lightfed.strategies.requirements import check_requirements

    sgd = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    for strategy in (QFedAvg(q=1.0), AgnosticFL()):
        name = type(strategy).__name__
        with pytest.raises(ConfigError, match=f"{name}'s clients send loss_at_global computed from their data outside"):
            check_requirements(strategy, sgd, DPSGD(noise_multiplier=1.0))
    check_requirements(QFedAvg(q=0.0), sgd, DPSGD(noise_multiplier=1.0))  # q = 0 sends no loss


def test_qfedavg_without_a_step_size_asks_for_lipschitz():
    update = ClientUpdate(0, torch.ones(2), torch.zeros(0), 10, 0, 0.0, torch.tensor(0.0), {LOSS_AT_GLOBAL: 1.0})
    with pytest.raises(ConfigError, match="client 0 took no step of positive size: set strategy.lipschitz"):
        _aggregate(QFedAvg(q=1.0), torch.zeros(2), [update])
    assert torch.isfinite(_aggregate(QFedAvg(q=1.0, lipschitz=1.0), torch.zeros(2), [update])).all()
