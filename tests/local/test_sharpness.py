"""lightfed.local.sharpness: each step's gradient replaced by the gradient at w + e(w), e SAM's rho g / ||g|| or
ASAM's rho T^2 g / ||T g|| (T = |w| + eta); the weights are restored."""

import math

import pytest
import torch

from lightfed.errors import ConfigError
from lightfed.local import SharpnessAware
from tests.local.conftest import Client

W = [1.0, -2.0, 0.5]  # on the batch t = 0 the gradient is w itself: g = (1, -2, 0.5), ||g|| = sqrt(5.25)


def test_sam_evaluates_the_gradient_at_w_plus_rho_g_over_its_norm_and_restores_w():
    client, rule = Client(W), SharpnessAware(rho=0.3)
    rule.start(client.flat.params.clone(), client.context)
    grad = client.gradient([0.0, 0.0, 0.0])
    rule.adjust(grad, client.flat.params)
    (at,) = client.recomputed_at
    ascent = at - torch.tensor(W)
    assert math.isclose(float(ascent.norm()), 0.3, rel_tol=1e-6)  # the perturbation has norm rho
    e = [0.3 * x / math.sqrt(5.25) for x in W]
    torch.testing.assert_close(ascent, torch.tensor(e))
    torch.testing.assert_close(grad, torch.tensor([w + d for w, d in zip(W, e, strict=True)]))  # grad F(w + e) = w + e
    assert client.flat.params.tolist() == W and grad.data_ptr() == client.flat.grads.data_ptr()


def test_asam_scales_the_ascent_by_t_squared_over_the_norm_of_t_g():
    """T = |w| + 0.5 = (1.5, 2.5, 1): T g = (1.5, -5, 0.5), ||T g|| = sqrt(27.5), T^2 g = (2.25, -12.5, 0.5)."""
    client, rule = Client(W), SharpnessAware(rho=0.2, adaptive=True, eta=0.5)
    rule.start(client.flat.params.clone(), client.context)
    grad = client.gradient([0.0, 0.0, 0.0])
    rule.adjust(grad, client.flat.params)
    e = torch.tensor([2.25, -12.5, 0.5]) * (0.2 / math.sqrt(27.5))
    torch.testing.assert_close(client.recomputed_at[0] - torch.tensor(W), e)
    torch.testing.assert_close(grad, torch.tensor(W) + e)
    assert client.flat.params.tolist() == W


def test_rho_0_is_plain_steps_with_one_gradient_a_step():
    client, rule = Client(W), SharpnessAware(rho=0.0)
    rule.start(client.flat.params.clone(), client.context)
    grad = client.gradient([1.0, 1.0, 1.0])
    rule.adjust(grad, client.flat.params)
    assert client.recomputed_at == [] and grad.tolist() == [0.0, -3.0, -0.5]
    assert rule.gradients_per_step == 1 and SharpnessAware(rho=0.05).gradients_per_step == 2


def test_negative_settings_and_scaled_gradients_are_refused():
    with pytest.raises(ConfigError, match="SAM's rho must be >= 0, got -0.1"):
        SharpnessAware(rho=-0.1)
    with pytest.raises(ConfigError, match="ASAM's eta must be >= 0, got -1"):
        SharpnessAware(adaptive=True, eta=-1)
    client = Client(W)
    client.context.scales_gradients = True
    with pytest.raises(ConfigError, match="sharpness-aware steps need unscaled gradients"):
        SharpnessAware().start(client.flat.params.clone(), client.context)
