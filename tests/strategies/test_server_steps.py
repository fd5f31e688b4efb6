"""The server updates as pure functions, on 2-coordinate tensors, against values computed by hand: each returns new
state and leaves the state it was given unchanged."""

import math

import pytest
import torch

from lightfed.strategies.ca2fl import ca2fl_step
from lightfed.strategies.fadas import AMSGradSettings, amsgrad_step, delay_scale
from lightfed.strategies.fedavgm import momentum_step
from lightfed.strategies.fedopt import FedOptSettings, adagrad_step, adam_step, fedopt_lr, yogi_step
from lightfed.strategies.masfl import masfl_state_step
from lightfed.strategies.scaffold import client_control_variate, server_control_variate


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values)


def unchanged(*tensors: torch.Tensor):
    """Copies of ``tensors``, to check after a call that it left them as they were."""
    return [tensor.clone() for tensor in tensors]


# D = [2, -2], m = 0, b1 = 0.5: m+ = 0.5 D = [1, -1] for all three; lr 0.5, tau 1.
FEDOPT = FedOptSettings(lr=0.5, beta1=0.5, beta2=0.75, tau=1.0)


@pytest.mark.parametrize(
    "step, v, expected_v, expected_params",
    [
        # 0.75 v + 0.25 D^2 = [3 + 1, 0 + 1]; sqrt(v+) + 1 = [3, 2]
        (adam_step, t(4.0, 0.0), t(4.0, 1.0), [1 + 0.5 / 3, 2 - 0.5 / 2]),
        # v - 0.25 D^2 sign(v - D^2), D^2 = [4, 4], signs [-1, +1]: [3 + 1, 10 - 1]; sqrt(v+) + 1 = [3, 4]
        (yogi_step, t(3.0, 10.0), t(4.0, 9.0), [1 + 0.5 / 3, 2 - 0.5 / 4]),
        # v + D^2 = [0 + 4, 5 + 4]; sqrt(v+) + 1 = [3, 4]
        (adagrad_step, t(0.0, 5.0), t(4.0, 9.0), [1 + 0.5 / 3, 2 - 0.5 / 4]),
    ],
    ids=["adam", "yogi", "adagrad"],
)
def test_fedopt_steps_by_hand(step, v, expected_v, expected_params):
    """x+ = x + 0.5 m+ / (sqrt(v+) + 1), x = [1, 2]."""
    params, delta, m = t(1.0, 2.0), t(2.0, -2.0), t(0.0, 0.0)
    before = unchanged(params, delta, m, v)
    new_params, new_m, new_v = step(params, delta, m, v, FEDOPT)
    assert torch.equal(new_m, t(1.0, -1.0))
    assert torch.equal(new_v, expected_v)
    assert new_params.tolist() == pytest.approx(expected_params)
    assert all(torch.equal(a, b) for a, b in zip(before, (params, delta, m, v), strict=True))


def test_fedopt_learning_rate_with_and_without_bias_correction():
    assert fedopt_lr(0.5, 0.5, 0.75, "none", round=3) == 0.5
    # "adam", round 0: t = 1, sqrt(1 - 0.75) / (1 - 0.5) = 0.5 / 0.5 = 1
    assert fedopt_lr(0.5, 0.5, 0.75, "adam", round=0) == pytest.approx(0.5)
    # "flower", round 0: t = 2, sqrt(1 - 0.5625) / (1 - 0.25) = (sqrt(7) / 4) / (3 / 4) = sqrt(7) / 3
    assert fedopt_lr(0.5, 0.5, 0.75, "flower", round=0) == pytest.approx(0.5 * math.sqrt(7) / 3)


def test_scaffold_control_variates_by_hand():
    c_i, c, delta = t(1.0, 0.0), t(0.5, 0.5), t(1.0, -2.0)
    before = unchanged(c_i, c, delta)
    # c_i - c - delta / T, T = 0.5: [1 - 0.5 - 2, 0 - 0.5 + 4]
    assert torch.equal(client_control_variate(c_i, c, delta, 0.5), t(-1.5, 3.5))
    # c + sum(dc) / N, N = 4, the sums in float64: [0.5 + 0.5, 0.5 - 1]
    new_c = server_control_variate(c, torch.tensor([2.0, -4.0], dtype=torch.float64), 4)
    assert torch.equal(new_c, t(1.0, -0.5)) and new_c.dtype == torch.float32
    assert all(torch.equal(a, b) for a, b in zip(before, (c_i, c, delta), strict=True))


def test_ca2fl_step_by_hand():
    params, h, dh = t(1.0, 1.0), t(0.5, -1.0), t(1.0, 2.0)
    before = unchanged(params, h, dh)
    new_params, new_h = ca2fl_step(params, h, dh, count=t(2.0), num_clients=4, server_lr=0.5)
    # v = h + dh / 2 = [1, 0]; x+ = x + 0.5 v = [1.5, 1]; h+ = h + dh / 4 = [0.75, -0.5]
    assert torch.equal(new_params, t(1.5, 1.0))
    assert torch.equal(new_h, t(0.75, -0.5))
    assert all(torch.equal(a, b) for a, b in zip(before, (params, h, dh), strict=True))


def test_fadas_delay_scale():
    assert delay_scale([0, 3, 1], delay_adaptive=True, delay_threshold=1) == pytest.approx(1 / 3)
    assert delay_scale([1, 1], delay_adaptive=True, delay_threshold=1) == 1.0  # not above the threshold
    assert delay_scale([5], delay_adaptive=False, delay_threshold=1) == 1.0


def test_amsgrad_step_by_hand():
    params, delta, m, v, v_hat = t(0.0, 0.0), t(2.0, -2.0), t(0.0, 0.0), t(0.0, 0.0), t(0.0, 4.0)
    before = unchanged(params, delta, m, v, v_hat)
    settings = AMSGradSettings(server_lr=0.5, beta1=0.5, beta2=0.75, eps=1.0)
    new_params, new_m, new_v, new_v_hat = amsgrad_step(params, delta, m, v, v_hat, step=1, scale=0.5, settings=settings)
    assert torch.equal(new_m, t(1.0, -1.0))  # 0.5 m + 0.5 D
    assert torch.equal(new_v, t(1.0, 1.0))  # 0.75 v + 0.25 D^2
    assert torch.equal(new_v_hat, t(1.0, 4.0))  # max(v_hat, v+)
    # t = 1: sqrt(v_hat+ / 0.25) + 1 = [3, 5]; 0.5 * 0.5 / (1 - 0.5) = 0.5; x+ = 0.5 m+ / [3, 5]
    assert new_params.tolist() == pytest.approx([1 / 6, -1 / 10])
    assert all(torch.equal(a, b) for a, b in zip(before, (params, delta, m, v, v_hat), strict=True))


def test_amsgrad_bias_correction_at_a_later_step():
    """t = 2, D = 0, m = [1, 0], v = v_hat = [1, 0]: m+ = [0.5, 0], v+ = [0.75, 0], v_hat+ = [1, 0];
    x+ = 0.5 / (1 - 0.25) * 0.5 / (sqrt(1 / (1 - 0.5625)) + eps) on the first coordinate."""
    settings = AMSGradSettings(server_lr=0.5, beta1=0.5, beta2=0.75, eps=0.5)
    zero = t(0.0, 0.0)
    new_params, _, _, new_v_hat = amsgrad_step(zero, zero, t(1.0, 0.0), t(1.0, 0.0), t(1.0, 0.0), 2, 1.0, settings)
    assert torch.equal(new_v_hat, t(1.0, 0.0))
    expected = 0.5 / 0.75 * 0.5 / (math.sqrt(16 / 7) + 0.5)
    assert new_params.tolist() == pytest.approx([expected, 0.0])


def test_fedavgm_momentum_step_by_hand():
    params, velocity, delta = t(1.0, 1.0), t(2.0, 0.0), t(1.0, -1.0)
    before = unchanged(params, velocity, delta)
    new_params, new_velocity = momentum_step(params, velocity, delta, server_lr=0.5, momentum=0.5)
    assert torch.equal(new_velocity, t(2.0, -1.0))  # 0.5 v + delta
    assert torch.equal(new_params, t(2.0, 0.5))  # x + 0.5 v+
    assert all(torch.equal(a, b) for a, b in zip(before, (params, velocity, delta), strict=True))


def test_masfl_state_step_by_hand():
    c, g, dc = t(1.0, 0.0), t(0.0, 2.0), t(2.0, 4.0)
    before = unchanged(c, g, dc)
    new_c, new_g = masfl_state_step(c, g, dc, count=t(2.0), num_clients=4, beta=0.5)
    # g+ = 0.5 (dc / 2 + c) + 0.5 g, from the old c: 0.5 [2, 2] + [0, 1] = [1, 2]; c+ = c + dc / 4 = [1.5, 1]
    assert torch.equal(new_g, t(1.0, 2.0))
    assert torch.equal(new_c, t(1.5, 1.0))
    assert all(torch.equal(a, b) for a, b in zip(before, (c, g, dc), strict=True))
