"""Server arithmetic of the asynchronous strategies on flat vectors, against numbers worked out by hand."""

import math

import pytest
import torch

from lightfed.core.messages import ClientUpdate
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.strategies import CA2FL, FADAS, AdaMasFL, AsyncSetting, FedBuff, MasFL
from lightfed.strategies.base import ServerContext
from lightfed.strategies.requirements import check_requirements


def _update(client_id: int, delta=(0.0,), grad_mean=None, local_time: float = 1.0) -> ClientUpdate:
    report = {} if grad_mean is None else {"grad_mean": torch.tensor(grad_mean)}
    return ClientUpdate(client_id, torch.tensor(delta), torch.zeros(0), 10, 1, local_time, torch.tensor(0.0), report)


def _aggregate(strategy, params, updates, round=0, staleness=None):
    sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
    staleness = staleness or [0] * len(updates)
    for update, tau in zip(updates, staleness, strict=False):
        strategy.accumulate(sums, update, tau)
    return strategy.aggregate(params, sums, round, staleness)


def _ready(strategy, setting=None, num_clients=4, dim=1):
    strategy.configure_async(setting or AsyncSetting(buffer_size=2, local_steps=5, rounds=50))
    strategy.setup(ServerContext(torch.zeros(dim), num_clients))
    return strategy


def test_masfl_rebuilds_momentum_from_the_old_c_with_1_over_s_and_moves_c_with_1_over_n():
    masfl = _ready(MasFL(server_lr=0.1, beta=0.5))
    for i, c_i in enumerate([1.0, 2.0, 3.0, 6.0]):  # warm-up: c = mean = 3, g = c
        masfl.client_states.set(i, "c", torch.tensor([c_i]))
    masfl.c.fill_(3.0)
    masfl.g.fill_(3.0)
    assert masfl.package()["u"].item() == pytest.approx(3.0)  # beta c + (1 - beta) g
    # clients 0 and 3 report new variates 5 and 4: dc = (5 - 1) + (4 - 6) = 2
    params = _aggregate(masfl, torch.tensor([1.0]), [_update(0, grad_mean=[5.0]), _update(3, grad_mean=[4.0])])
    g = 0.5 * (2 / 2 + 3.0) + 0.5 * 3.0  # beta (dc / S + c_old) + (1 - beta) g = 3.5
    assert masfl.g.item() == pytest.approx(g)
    assert params.item() == pytest.approx(1.0 - 0.1 * g)
    assert masfl.c.item() == pytest.approx(3.0 + 2 / 4)  # c + dc / N
    assert masfl.client_states.get(0, "c").item() == 5.0 and masfl.client_states.get(3, "c").item() == 4.0


@pytest.mark.parametrize(
    "s, k, t, beta, gamma, eta",
    [
        (10, 20, 500, 0.6325, 0.03557, 0.002236),
        (10, 10, 1000, 0.3162, 0.01778, 0.003162),
        (5, 10, 300, 0.4082, 0.03689, 0.005774),
    ],
)
def test_adamasfl_step_sizes_come_from_s_k_t_alone(s, k, t, beta, gamma, eta):
    ada = _ready(AdaMasFL(), AsyncSetting(s, k, t))
    assert (ada.beta, ada.server_lr, ada.local_lr) == pytest.approx((beta, gamma, eta), rel=1e-3)
    scaled = _ready(AdaMasFL(gamma_mult=3.0, eta_mult=0.1), AsyncSetting(s, k, t))
    assert (scaled.server_lr, scaled.local_lr) == pytest.approx((3 * gamma, 0.1 * eta), rel=1e-3)


def test_beta_is_clipped_to_one_when_t_is_below_s_k():
    assert _ready(AdaMasFL(), AsyncSetting(10, 20, 100)).beta == 1.0
    assert _ready(MasFL(), AsyncSetting(2, 5, 40)).beta == pytest.approx(math.sqrt(10 / 40))


def test_adamasfl_moves_the_model_by_the_mean_normalised_displacement():
    ada = _ready(AdaMasFL(), AsyncSetting(2, 4, 16), dim=2)  # gamma = 8^(1/4) / 16^(3/4) = 0.2102
    gamma = 8**0.25 / 8
    updates = [
        _update(0, delta=[-0.1, 0.0], grad_mean=[0.0, 0.0], local_time=0.1),
        _update(1, delta=[0.0, 0.05], grad_mean=[0.0, 0.0], local_time=0.1),
    ]
    params = _aggregate(ada, torch.zeros(2), updates)
    # D_0 = (1, 0), D_1 = (0, -0.5): x <- x - gamma (0.5, -0.25)
    torch.testing.assert_close(params, torch.tensor([-0.5 * gamma, 0.25 * gamma]))


def test_ca2fl_with_every_client_in_every_buffer_is_fedbuff():
    ca2fl, fedbuff = (
        _ready(CA2FL(server_lr=0.5), num_clients=3, dim=2),
        _ready(FedBuff(server_lr=0.5), num_clients=3, dim=2),
    )
    x_ca2fl = x_fedbuff = torch.zeros(2)
    for round, deltas in enumerate([[[1.0, 0.0], [2.0, 1.0], [0.0, -3.0]], [[-1.0, 4.0], [0.5, 0.5], [2.0, 2.0]]]):
        updates = [_update(i, delta=d) for i, d in enumerate(deltas)]
        x_ca2fl = _aggregate(ca2fl, x_ca2fl, updates, round)
        x_fedbuff = _aggregate(fedbuff, x_fedbuff, updates, round)
        torch.testing.assert_close(x_ca2fl, x_fedbuff)
    assert x_fedbuff.tolist() == pytest.approx([0.5 * (1 / 1 + 1.5 / 3), 0.5 * (-2 / 3 + 6.5 / 3)])


def test_ca2fl_calibrates_a_partial_buffer_with_the_cached_updates():
    ca2fl = _ready(CA2FL(server_lr=1.0), num_clients=4)
    _aggregate(ca2fl, torch.zeros(1), [_update(0, delta=[4.0]), _update(1, delta=[8.0])])  # h = (4 + 8) / 4 = 3
    params = _aggregate(ca2fl, torch.zeros(1), [_update(0, delta=[2.0]), _update(2, delta=[1.0])], round=1)
    assert params.item() == pytest.approx(3.0 + ((2.0 - 4.0) + (1.0 - 0.0)) / 2)  # h + mean(delta_i - h_i)
    assert ca2fl.h.item() == pytest.approx((2.0 + 8.0 + 1.0) / 4)


def test_fedbuff_staleness_weighting():
    plain, weighted = _ready(FedBuff(server_lr=2.0)), _ready(FedBuff(server_lr=2.0, staleness_weighting=True))
    updates = [_update(0, delta=[1.0]), _update(1, delta=[1.0])]
    assert _aggregate(plain, torch.zeros(1), updates, staleness=[0, 3]).item() == pytest.approx(2.0)
    assert _aggregate(weighted, torch.zeros(1), updates, staleness=[0, 3]).item() == pytest.approx(2.0 * (1 + 0.5) / 2)


def test_fadas_first_step_without_moments_is_a_sign_step_and_delays_divide_it():
    fadas = _ready(FADAS(server_lr=0.1, beta1=0.0, beta2=0.0, eps=1e-8), dim=3)
    updates = [_update(0, delta=[2.0, -1.0, 0.0]), _update(1, delta=[4.0, -3.0, 0.0])]
    params = _aggregate(fadas, torch.zeros(3), updates, staleness=[0, 1])
    torch.testing.assert_close(params, torch.tensor([0.1, -0.1, 0.0]), rtol=1e-6, atol=1e-9)
    params = _aggregate(fadas, torch.zeros(3), updates, round=1, staleness=[4, 2])  # tau_max 4 > 1: step / 4
    torch.testing.assert_close(params, torch.tensor([0.025, -0.025, 0.0]), rtol=1e-6, atol=1e-9)


def test_fadas_bias_corrected_amsgrad_step():
    fadas = _ready(FADAS(server_lr=1.0, beta1=0.5, beta2=0.75, eps=1e-12, delay_adaptive=False))
    _aggregate(fadas, torch.zeros(1), [_update(0, delta=[2.0])])  # m = 1, v = 1, v_hat = 1
    params = _aggregate(fadas, torch.zeros(1), [_update(0, delta=[0.0])], round=1, staleness=[9])
    # m = 0.5, v = 0.75, v_hat = 1; step = 0.5 / (1 - 0.25) / sqrt(1 / (1 - 0.5625))
    assert params.item() == pytest.approx(0.5 / 0.75 / math.sqrt(1 / 0.4375))


def test_asynchronous_strategies_refuse_the_synchronous_trainer_and_bad_settings():
    sgd = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ConfigError, match="add an `asynchronous:` section"):
        check_requirements(MasFL(), sgd)  # the synchronous trainer's check
    with pytest.raises(ConfigError, match="set trainer.local_steps"):
        AdaMasFL().configure_async(AsyncSetting(2, None, 10))
    with pytest.raises(ConfigError, match="strategy.beta"):
        MasFL().configure_async(AsyncSetting(2, None, 10))
    with pytest.raises(ConfigError, match=r"strategy.beta must be in \(0, 1\]"):
        MasFL(beta=1.5)
    with pytest.raises(ConfigError, match="strategy.beta1"):
        FADAS(beta1=1.0)
