import math

import lightning as L
import pytest
import torch
from lightning.fabric import Fabric
from torch import nn

from lightfed.core.messages import ClientPlan
from lightfed.errors import ConfigError
from lightfed.privacy import ClippedGaussianNoise
from lightfed.run.client import ClientTrainer
from tests.conftest import small_data


class Center(L.LightningModule):
    """f(w) = ||w - c||^2 / 2 whatever the batch: gradient w - c."""

    def __init__(self, c):
        super().__init__()
        self.w = nn.Parameter(torch.zeros_like(c))
        self.c = c

    def training_step(self, batch, batch_idx):
        return 0.5 * (self.w - self.c).square().sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def _client(c, privacy, clients_per_round):
    data = small_data()
    data.setup(seed=0, device=torch.device("cpu"))
    privacy.setup(data, clients_per_round, planned=lambda: [])
    return ClientTrainer(Fabric(accelerator="cpu", devices=1), Center(c), data, privacy)


def test_the_whole_step_gradient_is_clipped_to_c():
    c = torch.tensor([3.0, -4.0, 0.0])
    client = _client(c, ClippedGaussianNoise(sigma2=0.0, max_grad_norm=2.0), clients_per_round=10)
    update = client.train(ClientPlan(client_id=0, round=0, seed=0, steps=1), torch.zeros(3), torch.zeros(0))
    g = -c  # norm 5, clipped to norm 2
    assert torch.allclose(update.delta, -0.5 * g * 2.0 / 5.0)


@pytest.mark.parametrize("scales_with_clip, std", [(True, math.sqrt(0.02) * 3.0 / 2.0), (False, math.sqrt(0.02) / 2.0)])
def test_the_noise_std_is_sigma_c_over_sqrt_m(scales_with_clip, std):
    c = torch.zeros(5000)
    privacy = ClippedGaussianNoise(sigma2=0.02, max_grad_norm=3.0, noise_scales_with_clip=scales_with_clip)
    client = _client(c, privacy, clients_per_round=4)  # at the optimum: the step is the noise alone
    update = client.train(ClientPlan(client_id=0, round=0, seed=0, steps=1), c, torch.zeros(0))
    noise = -update.delta / 0.5
    assert float(noise.std()) == pytest.approx(std, rel=0.04) and abs(float(noise.mean())) < 0.05 * std


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="sigma2 must be >= 0"):
        ClippedGaussianNoise(sigma2=-0.01)
    with pytest.raises(ConfigError, match="max_grad_norm must be > 0"):
        ClippedGaussianNoise(max_grad_norm=0.0)
