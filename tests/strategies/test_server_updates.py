"""Each strategy's server update on a 3-parameter example, against values computed by hand."""

import pytest
import torch

from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies import FedAdagrad, FedAdam, FedAvgM, FedExP, FedNova, FedProx, FedYogi, Scaffold
from lightfed.strategies.base import ServerContext

X = torch.tensor([1.0, 2.0, 3.0])


def _update(client_id, delta, examples=10, steps=1, local_time=0.1):
    return ClientUpdate(client_id, torch.tensor(delta), torch.zeros(0), examples, steps, local_time, torch.tensor(0.0))


def _round(strategy, updates, params=X, round=0):
    sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
    for update in updates:
        strategy.accumulate(sums, update)
    return strategy.aggregate(params, sums, round)


def _setup(strategy, num_clients=2):
    strategy.setup(ServerContext(X, num_clients))
    return strategy


def test_fedprox_aggregates_like_fedavg_and_hands_clients_the_proximal_term():
    strategy = _setup(FedProx(mu=0.5))
    new = _round(strategy, [_update(0, [1.0, 0.0, 0.0], examples=30), _update(1, [0.0, 4.0, 0.0], examples=10)])
    assert torch.allclose(new, X + torch.tensor([0.75, 1.0, 0.0]))
    rule = strategy.configure_client(ClientPlan(0, 0, 0, epochs=1)).rule
    rule.start(X, context=None)
    grad = torch.tensor([1.0, 1.0, 1.0])
    rule.adjust(grad, X + torch.tensor([2.0, 0.0, -4.0]))  # + 0.5 * (w - w_global)
    assert grad.tolist() == [2.0, 1.0, -1.0]


def test_fedavgm_accumulates_server_momentum():
    strategy = _setup(FedAvgM(server_lr=1.0, momentum=0.5))
    x1 = _round(strategy, [_update(0, [2.0, 0.0, 0.0]), _update(1, [0.0, 2.0, 0.0])])  # v = [1, 1, 0]
    x2 = _round(strategy, [_update(0, [0.0, 0.0, 2.0]), _update(1, [0.0, 0.0, 2.0])], params=x1)  # v = [.5, .5, 2]
    assert torch.allclose(x1, X + torch.tensor([1.0, 1.0, 0.0]))
    assert torch.allclose(x2, X + torch.tensor([1.5, 1.5, 2.0]))


def test_fednova_normalises_by_local_time():
    strategy = _setup(FedNova())
    # p = (0.5, 0.5); T = (0.1, 0.4); tau_eff = 0.25; d = (D_0 / 0.1, D_1 / 0.4) = ([10, 0, 0], [0, 10, 0])
    new = _round(
        strategy,
        [_update(0, [1.0, 0.0, 0.0], steps=1, local_time=0.1), _update(1, [0.0, 4.0, 0.0], steps=4, local_time=0.4)],
    )
    assert torch.allclose(new, X + 0.25 * torch.tensor([5.0, 5.0, 0.0]))


def test_fednova_is_fedavg_when_local_work_is_equal():
    from lightfed.strategies import FedAvg

    updates = [
        _update(0, [1.0, -2.0, 0.5], examples=30, local_time=0.3),
        _update(1, [0.0, 4.0, 1.0], examples=10, local_time=0.3),
    ]
    assert torch.allclose(_round(_setup(FedNova()), updates), _round(_setup(FedAvg()), updates))


@pytest.mark.parametrize(
    "strategy_class, expected_v",
    [
        # D = [1, -2, 0]; tau = 0.1, v0 = 0.01; beta2 = 0.5
        (FedAdagrad, [1.01, 4.01, 0.01]),
        (FedAdam, [0.505, 2.005, 0.005]),
        (FedYogi, [0.51, 2.01, 0.01]),  # v0 - 0.5 D^2 sign(v0 - D^2), D^2 = [1, 4, 0]: signs -1, -1, +1
    ],
)
def test_fedopt_moments_and_step(strategy_class, expected_v):
    strategy = _setup(strategy_class(server_lr=0.1, beta1=0.5, beta2=0.5, tau=0.1))
    new = _round(strategy, [_update(0, [2.0, -4.0, 0.0]), _update(1, [0.0, 0.0, 0.0])])
    m = torch.tensor([0.5, -1.0, 0.0])
    v = torch.tensor(expected_v)
    assert torch.allclose(strategy.m, m) and torch.allclose(strategy.v, v)
    assert torch.allclose(new, X + 0.1 * m / (v.sqrt() + 0.1))


@pytest.mark.parametrize("strategy_class", [FedAdagrad, FedAdam, FedYogi])
def test_fedopt_with_a_zero_update_leaves_the_model_unchanged(strategy_class):
    strategy = _setup(strategy_class())
    assert torch.equal(_round(strategy, [_update(0, [0.0, 0.0, 0.0]), _update(1, [0.0, 0.0, 0.0])]), X)


def test_fedexp_extrapolates_by_client_disagreement():
    strategy = _setup(FedExP(eps=1e-3))
    # D = ([3, 0, 0], [-1, 0, 0]): sum ||D_i||^2 = 10, mean = [1, 0, 0] with ||.||^2 = 1: eta = 10 / (2 * 2 * 1.001)
    new = _round(strategy, [_update(0, [3.0, 0.0, 0.0]), _update(1, [-1.0, 0.0, 0.0])])
    eta = 10 / (4 * 1.001)
    assert strategy.last_server_lr == pytest.approx(eta)
    assert torch.allclose(new, X + eta * torch.tensor([1.0, 0.0, 0.0]))


def test_fedexp_server_step_is_never_below_one():
    strategy = _setup(FedExP())
    same = [_update(0, [1.0, 1.0, 1.0]), _update(1, [1.0, 1.0, 1.0])]  # no disagreement: ratio 1/2 -> clamped to 1
    assert torch.allclose(_round(strategy, same), X + 1.0)
    assert strategy.last_server_lr == 1.0


def test_scaffold_control_variates_and_server_step():
    strategy = _setup(Scaffold(server_lr=1.0), num_clients=4)
    plan = strategy.configure_client(ClientPlan(0, 0, 0, epochs=1))
    assert torch.equal(plan.rule.vector, torch.zeros(3))  # c = c_i = 0 at the start
    # client 0: K lr = T = 0.5, delta [1, 0, -1] -> c_0 = 0 - 0 - delta / 0.5 = [-2, 0, 2]; client 1: [0, -2, 0]
    new = _round(strategy, [_update(0, [1.0, 0.0, -1.0], local_time=0.5), _update(1, [0.0, 1.0, 0.0], local_time=0.5)])
    assert torch.allclose(new, X + torch.tensor([0.5, 0.5, -0.5]))
    assert torch.allclose(strategy.c, torch.tensor([-2.0, -2.0, 2.0]) / 4)  # sum of dc over N = 4 clients
    assert torch.allclose(strategy.client_states.get(0, "c"), torch.tensor([-2.0, 0.0, 2.0]))
    # next round, client 0 is told c - c_0
    correction = strategy.configure_client(ClientPlan(0, 1, 0, epochs=1)).rule.vector
    assert torch.allclose(correction, torch.tensor([-0.5, -0.5, 0.5]) - torch.tensor([-2.0, 0.0, 2.0]))


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: FedProx(mu=-0.1), "strategy.mu must be >= 0"),
        (lambda: FedAvgM(momentum=1.0), "strategy.momentum must be in"),
        (lambda: FedAdam(beta1=1.5), "strategy.beta1 must be in"),
        (lambda: FedYogi(tau=0.0), "strategy.tau must be > 0"),
        (lambda: FedExP(eps=0.0), "strategy.eps must be > 0"),
    ],
)
def test_bad_strategy_settings_are_refused(build, message):
    with pytest.raises(ConfigError, match=message):
        build()
