"""lightfed.local.apfl_mixing: APFL's personal model v and mixing weight alpha, stepped with the gradient at the
mixture alpha v + (1 - alpha) w beside each plain step of w."""

import pytest
import torch

from lightfed.local.apfl_mixing import APFLMixing
from tests.local.conftest import Client

# w = (1, -2, 0.5), v = (0, 1, 2), batch t = (0.5, 0.5, 0.5), lr 0.1, alpha 0.25:
# the mixture is 0.25 v + 0.75 w = (0.75, -1.25, 0.875), its gradient (0.25, -1.75, 0.375);
# v <- v - 0.1 x 0.25 x (0.25, -1.75, 0.375) = (-0.00625, 1.04375, 1.990625);
# <v - w, grad> = <(-1, 3, 1.5), (0.25, -1.75, 0.375)> = -0.25 - 5.25 + 0.5625 = -4.9375.
W, V, T = [1.0, -2.0, 0.5], [0.0, 1.0, 2.0], [0.5, 0.5, 0.5]


def _one_step(alpha_lr: float | None) -> tuple[APFLMixing, Client, torch.Tensor]:
    client, rule = Client(W, b=[3.0, 4.0]), APFLMixing(torch.tensor(V), alpha=0.25, alpha_lr=alpha_lr)
    rule.start(client.flat.params.clone(), client.context)
    grad = client.gradient(T)  # at w: w - t = (0.5, -2.5, 0); the buffer b is now (4, 5)
    rule.adjust(grad, client.flat.params)
    return rule, client, grad


def test_v_steps_with_alpha_times_the_mixtures_gradient_and_w_its_grad_and_buffers_are_restored():
    rule, client, grad = _one_step(alpha_lr=None)
    (mixture,) = client.recomputed_at
    torch.testing.assert_close(mixture, torch.tensor([0.75, -1.25, 0.875]))
    report = rule.report()
    torch.testing.assert_close(report["personal"], torch.tensor([-0.00625, 1.04375, 1.990625]))
    assert report["alpha"].dtype == torch.float64 and float(report["alpha"]) == 0.25  # no alpha_lr: alpha is fixed
    assert client.flat.params.tolist() == W and grad.tolist() == [0.5, -2.5, 0.0]
    assert client.flat.buffers.tolist() == [4.0, 5.0] and report["personal_buffers"].tolist() == [4.0, 5.0]
    assert rule.gradients_per_step == 2


@pytest.mark.parametrize(
    ("alpha_lr", "alpha"),
    [(0.05, 0.25 + 0.05 * 4.9375), (0.5, 1.0), (-0.1, 0.0)],  # clipped to [0, 1]
)
def test_alpha_moves_against_v_minus_w_dot_the_mixtures_gradient_clipped_to_0_1(alpha_lr, alpha):
    rule, _, _ = _one_step(alpha_lr)
    assert float(rule.report()["alpha"]) == pytest.approx(alpha, abs=1e-6)
    # v moved with the step's alpha, the one before the update
    torch.testing.assert_close(rule.report()["personal"], torch.tensor([-0.00625, 1.04375, 1.990625]))


def test_without_a_personal_model_v_starts_from_the_global_one_and_the_next_step_uses_the_new_alpha():
    """v = w: the mixture is w, v <- w - 0.1 x 0.5 x (w - t); then alpha stays 0.5 (v - w = 0 at the first step)."""
    client, rule = Client(W), APFLMixing(None, alpha=0.5, alpha_lr=1.0)
    rule.start(client.flat.params.clone(), client.context)
    rule.adjust(client.gradient(T), client.flat.params)
    v = torch.tensor(W) - 0.05 * (torch.tensor(W) - torch.tensor(T))
    torch.testing.assert_close(rule.report()["personal"], v)
    assert float(rule.report()["alpha"]) == 0.5
    torch.testing.assert_close(client.recomputed_at[0], torch.tensor(W))
    rule.adjust(client.gradient(T), client.flat.params)  # second step: mixture 0.5 v + 0.5 w
    torch.testing.assert_close(client.recomputed_at[1], 0.5 * v + 0.5 * torch.tensor(W))
