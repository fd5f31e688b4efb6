import math
from functools import partial

import lightning as L
import numpy as np
import pytest
import torch
from lightning.fabric import Fabric
from torch import nn

from lightfed.core.messages import ClientPlan
from lightfed.core.sums import Sums
from lightfed.errors import ConfigError
from lightfed.models import MLP
from lightfed.privacy import ClippedGaussianNoise
from lightfed.run.client import ClientTrainer
from lightfed.strategies import AdaptFed
from lightfed.strategies.adaptfed import RateSettings, lr_scale, relative_progress, relative_progress_lr, welford_step
from lightfed.strategies.base import ServerContext
from tests.conftest import small_data, small_trainer

ETA0 = 0.1
C = torch.tensor([1.0, -2.0, 2.0])


def test_lr_scale_matches_hand_computed_values():
    assert lr_scale([0.0]) == pytest.approx(2.0)  # N = 1, beta = 2, RP = 0: twice the base rate
    assert lr_scale([0.5, -1.0], beta=2.0) == pytest.approx(2.0 / ((math.exp(0.5) + math.exp(-1.0)) / 2))
    assert lr_scale([100.0], rp_max=1.0) == pytest.approx(2.0 / math.e)
    assert lr_scale([-50.0], bounds=(0.5, 3.0)) == 3.0 and lr_scale([50.0], bounds=(0.5, 3.0)) == 0.5


def test_log_space_equals_the_direct_formula_where_it_does_not_overflow():
    rng = np.random.default_rng(0)
    for _ in range(50):
        rps = rng.uniform(-30, 30, size=rng.integers(1, 12))
        assert lr_scale(list(rps), beta=1.7) == pytest.approx(1.7 / np.mean(np.exp(rps)), rel=1e-12)


@pytest.mark.parametrize("rps", [[1e5], [-1e5], [1e308, -1e308], [float("nan")], [float("inf")], [-float("inf"), 0.0]])
def test_the_rate_is_finite_and_positive_whatever_the_relative_progress(rps):
    scale = lr_scale(rps)
    assert math.isfinite(scale) and scale > 0
    assert lr_scale([1e5]) < lr_scale([0.0]) < lr_scale([-1e5])


def test_relative_progress_product_and_ratio_forms():
    assert relative_progress(0.1, 4.0, -0.2) == pytest.approx(-0.08)
    assert relative_progress(0.1, 4.0, -0.2, form="ratio") == pytest.approx(-0.5)


def test_the_learning_rate_rule_by_hand():
    previous = (0.1, 4.0, 2.0)  # lr, mean squared step gradient, probe loss of the last participation
    # probe 1.5: dF = 1.5 - 2 = -0.5, RP = 0.1 * 4 * -0.5 = -0.2; history [0, -0.2]: 2 / ((e^0 + e^-0.2) / 2)
    scale, rp, history = relative_progress_lr([0.0], previous, 1.5, None, RateSettings())
    assert rp == pytest.approx(-0.2) and history == [0.0, rp]
    assert scale == pytest.approx(4 / (1 + math.exp(-0.2)))
    # a window of 1 keeps only the new RP: 2 / e^-0.2
    scale, _, history = relative_progress_lr([0.0], previous, 1.5, None, RateSettings(window=1))
    assert history == [pytest.approx(-0.2)] and scale == pytest.approx(2 * math.exp(0.2))
    # a given loss change (1.0) replaces the probe's: RP = 0.1 * 4 * 1 = 0.4; beta 3: 3 / e^0.4
    scale, rp, _ = relative_progress_lr([], previous, 1.5, 1.0, RateSettings(beta=3.0))
    assert rp == pytest.approx(0.4) and scale == pytest.approx(3 * math.exp(-0.4))
    # ratio form: dF / (lr E||g~||^2) = -0.5 / 0.4 = -1.25, clamped to rp_max 1 -> 2 / e^-1, then to bounds <= 4
    scale, rp, _ = relative_progress_lr([], previous, 1.5, None, RateSettings(form="ratio", rp_max=1.0))
    assert rp == pytest.approx(-1.25) and scale == pytest.approx(2 * math.e)
    assert relative_progress_lr([], previous, 1.5, None, RateSettings(form="ratio", bounds=(0.5, 4.0)))[0] == 4.0


def test_the_learning_rate_rule_warms_up_with_the_base_rate():
    """No earlier participation: no RP, and the rate is eta_0 (or lr_scale of a history kept from before)."""
    assert relative_progress_lr([], None, 1.5, None, RateSettings()) == (1.0, None, [])
    scale, rp, history = relative_progress_lr([0.0], None, 1.5, None, RateSettings())
    assert (scale, rp, history) == (pytest.approx(2.0), None, [0.0])


def test_welford_step_gives_the_variance_over_rounds():
    """Values 1 then 3: mean 2, squared deviations 1 + 1 = 2, variance 2 / 2 = 1."""
    state = welford_step([0.0, 0.0, 0.0], 1.0)
    assert state == (1.0, 1.0, 0.0)
    count, mean, squares = welford_step(state, 3.0)
    assert (count, mean, squares) == (2.0, 2.0, 2.0) and squares / count == 1.0


class Center(L.LightningModule):
    """f(w) = ||w - C||^2 / 2 whatever the batch."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3))

    def training_step(self, batch, batch_idx):
        return 0.5 * (self.w - C).square().sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=ETA0)


def _client():
    data = small_data()
    data.setup(seed=0, device=torch.device("cpu"))
    return ClientTrainer(Fabric(accelerator="cpu", devices=1), Center(), data)


def _round(strategy, client, round, params):
    plan = strategy.configure_client(ClientPlan(client_id=0, round=round, seed=0, steps=1))
    update = client.train(plan, params, torch.zeros(0))
    sums = Sums(strategy.sum_sizes(), torch.device("cpu"))
    strategy.accumulate(sums, update)
    return update.report, strategy.aggregate(params, sums, round)


def f(w):
    return float(0.5 * (w - C).square().sum())


def test_the_rate_follows_the_hand_computed_rule_rising_after_a_decrease_and_falling_after_an_increase():
    strategy, client = AdaptFed(rho=0.0), _client()
    strategy.setup(ServerContext(torch.zeros(3), 8))
    w0 = C + torch.tensor([0.3, 0.2, -0.1])
    first, w1 = _round(strategy, client, 0, w0)
    assert first["lr"] == pytest.approx(ETA0) and first["rp"] is None  # warm-up: no relative progress yet
    assert torch.allclose(w1, w0 - ETA0 * (w0 - C))
    second, w2 = _round(strategy, client, 1, w1)
    rp1 = ETA0 * float((w0 - C).square().sum()) * (f(w1) - f(w0))  # eta * ||g||^2 * dF, dF < 0
    assert second["rp"] == pytest.approx(rp1) and second["lr"] == pytest.approx(ETA0 * 2.0 / math.exp(rp1))
    assert second["lr"] > 2 * ETA0

    pushed = w2 + 0.5  # the next global model is worse: its loss went up
    third, _ = _round(strategy, client, 2, pushed)
    rp2 = second["lr"] * float((w1 - C).square().sum()) * (f(pushed) - f(w1))
    assert rp2 > 0 and third["rp"] == pytest.approx(rp2)
    assert third["lr"] == pytest.approx(ETA0 * 2.0 / ((math.exp(rp1) + math.exp(rp2)) / 2))
    assert third["lr"] < second["lr"]
    assert strategy.metrics()["rp_mean"] == pytest.approx(rp2) and strategy.metrics()["rp_var"] > 0


def test_the_lagged_global_mode_uses_the_change_of_the_servers_probe_losses():
    strategy, client = AdaptFed(rho=0.0, loss_change="global_lagged", window=1), _client()
    strategy.setup(ServerContext(torch.zeros(3), 8))
    w0 = C + torch.tensor([0.3, 0.2, -0.1])
    _, w1 = _round(strategy, client, 0, w0)
    second, w2 = _round(strategy, client, 1, w1)
    assert second["rp"] is None  # F(theta^{t-1}) - F(theta^{t-2}) needs two global losses
    third, _ = _round(strategy, client, 2, w2)
    rp = second["lr"] * float((w1 - C).square().sum()) * (f(w1) - f(w0))
    assert third["rp"] == pytest.approx(rp) and third["lr"] == pytest.approx(ETA0 * 2.0 / math.exp(rp))


def _model():
    L.seed_everything(0, verbose=False)
    return MLP(in_features=64, num_classes=10, optimizer=partial(torch.optim.SGD, lr=0.1))


def test_adaptfed_under_its_papers_noise_logs_finite_relative_progress_and_rates(tmp_path):
    # under DPSGD it is refused: its clients' relative progress is outside the accountant (test_accounted_messages)
    privacy = ClippedGaussianNoise(sigma2=0.01)
    metrics = small_trainer(tmp_path, rounds=3, local_steps=2, privacy=privacy).fit(_model(), small_data(), AdaptFed())
    for name in ["strategy/rp_mean", "strategy/rp_var", "strategy/lr_mean", "strategy/global_probe_loss"]:
        assert math.isfinite(metrics[name])
    assert metrics["strategy/lr_mean"] > 0


def test_resuming_adaptfed_reproduces_the_uninterrupted_run(tmp_path):
    model = _model()
    small_trainer(tmp_path / "full", rounds=4, clients_per_round=8, local_steps=2).fit(model, small_data(), AdaptFed())
    small_trainer(tmp_path / "cut", rounds=2, clients_per_round=8, local_steps=2).fit(
        _model(), small_data(), AdaptFed()
    )
    resumed = _model()
    small_trainer(tmp_path / "cut", rounds=4, clients_per_round=8, local_steps=2).fit(
        resumed, small_data(), AdaptFed(), ckpt_path="last"
    )
    assert torch.equal(resumed.net[1].weight, model.net[1].weight)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(beta=0.0), "beta must be > 0"),
        (dict(window=0), "window must be >= 1"),
        (dict(lr_bounds=(2.0, 1.0)), "lr_bounds must be"),
        (dict(rho=-1.0), "rho must be >= 0"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        AdaptFed(**settings)
