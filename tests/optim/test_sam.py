import lightning as L
import pytest
import torch
from lightning.fabric import Fabric
from torch import nn

from lightfed.core.messages import ClientPlan
from lightfed.errors import ConfigError
from lightfed.optim import SAM, sam_perturbation
from lightfed.privacy import DPSGD
from lightfed.privacy.base import NO_PRIVACY
from lightfed.run.client import ClientTrainer
from tests.conftest import small_data

A = torch.tensor([1.0, 4.0, 0.5])
B = torch.tensor([1.0, -2.0, 3.0])


def grad_at(w):
    """Gradient of the quadratic f(w) = 1/2 w^T diag(A) w - B^T w."""
    return A * w - B


def loss_at(w):
    return 0.5 * (A * w * w).sum() - (B * w).sum()


def hand_sam_step(w, lr, rho, adaptive=False, eta=0.01):
    g = grad_at(w)
    if adaptive:
        t = w.abs() + eta
        e = rho * t * t * g / torch.linalg.norm(t * g)
    else:
        e = rho * g / torch.linalg.norm(g)
    return w - lr * grad_at(w + e)


@pytest.mark.parametrize("adaptive", [False, True])
def test_sam_step_on_a_quadratic_equals_the_hand_computed_two_step_update(adaptive):
    w0 = torch.tensor([2.0, 1.0, -1.0])
    w = nn.Parameter(w0.clone())
    optimizer = SAM([w], torch.optim.SGD, rho=0.3, adaptive=adaptive, eta=0.1, lr=0.2)

    def closure():
        optimizer.zero_grad()
        loss = loss_at(w)
        loss.backward()
        return loss

    closure()
    optimizer.step(closure)
    assert torch.allclose(w.detach(), hand_sam_step(w0, 0.2, 0.3, adaptive, 0.1), atol=1e-6)


def test_the_perturbation_has_norm_rho_for_sam_and_is_scaled_by_the_weights_for_asam():
    g, w = torch.tensor([3.0, 4.0]), torch.tensor([2.0, 0.0])
    assert torch.allclose(sam_perturbation(g, w, 0.5), torch.tensor([0.3, 0.4]))
    # ASAM: T = |w| + 0.1 = (2.1, 0.1); T g = (6.3, 0.4); e = 0.5 T^2 g / ||T g||
    expected = 0.5 * torch.tensor([2.1**2 * 3.0, 0.1**2 * 4.0]) / (6.3**2 + 0.4**2) ** 0.5
    assert torch.allclose(sam_perturbation(g, w, 0.5, adaptive=True, eta=0.1), expected)


class Quadratic(L.LightningModule):
    """The quadratic above as a LightningModule, with a SAM optimizer."""

    def __init__(self, adaptive=False):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3))
        self.adaptive = adaptive

    def training_step(self, batch, batch_idx):
        return loss_at(self.w)

    def configure_optimizers(self):
        return SAM(self.parameters(), torch.optim.SGD, rho=0.3, adaptive=self.adaptive, eta=0.1, lr=0.2)


def _client(model, privacy=NO_PRIVACY):
    data = small_data()
    data.setup(seed=0, device=torch.device("cpu"))
    return ClientTrainer(Fabric(accelerator="cpu", devices=1), model, data, privacy)


@pytest.mark.parametrize("adaptive", [False, True])
def test_a_module_whose_optimizer_is_sam_gets_sam_steps_from_the_client_loop(adaptive):
    client = _client(Quadratic(adaptive))
    w0 = torch.tensor([2.0, 1.0, -1.0])
    update = client.train(ClientPlan(client_id=0, round=0, seed=0, steps=2), w0, torch.zeros(0))
    w2 = hand_sam_step(hand_sam_step(w0, 0.2, 0.3, adaptive, 0.1), 0.2, 0.3, adaptive, 0.1)
    assert torch.allclose(update.delta, w2 - w0, atol=1e-6)


def test_sam_refuses_a_step_without_closure_and_a_negative_radius():
    w = nn.Parameter(torch.zeros(2))
    with pytest.raises(ConfigError, match="needs a closure"):
        SAM([w], torch.optim.SGD, lr=0.1).step()
    with pytest.raises(ConfigError, match="rho must be >= 0"):
        SAM([w], torch.optim.SGD, rho=-1.0, lr=0.1)


def test_a_sam_optimizer_under_differential_privacy_is_refused_with_the_way_out():
    with pytest.raises(ConfigError, match="use strategy FedSAM or FedASAM"):
        _client(Quadratic(), DPSGD(noise_multiplier=1.0))
