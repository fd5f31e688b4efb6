import importlib.util
import math
from functools import partial

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.fabric import Fabric
from opacus.accountants import RDPAccountant
from torch import nn

from lightfed.core.messages import ClientPlan
from lightfed.core.seeding import sample_clients
from lightfed.data import DatasetSource, TensorSplits
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.local import SharpnessAware
from lightfed.models import MLP, VGG11
from lightfed.privacy import DPSGD
from lightfed.run.client import ClientTrainer
from lightfed.strategies import FedAvg
from tests.conftest import config_options, refusal_lines, small_data, small_trainer, trainer_options


class Fixed(DatasetSource):
    """One client holding exactly the given examples."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def load(self, seed):
        return TensorSplits(self.x, self.y, self.x, self.y, num_classes=1, client_indices=[torch.arange(len(self.y))])


class LeastSquares(L.LightningModule):
    """Per-example loss (w.x - y)^2 / 2: per-example gradient (w.x - y) x, known in closed form."""

    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, 1, bias=False)
        nn.init.zeros_(self.lin.weight)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return 0.5 * (self.lin(x).squeeze(1) - y.float()).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1.0)


class DictLeastSquares(LeastSquares):
    """LeastSquares whose batches are dicts ``{"x": x, "y": y}``."""

    def training_step(self, batch, batch_idx):
        return super().training_step((batch["x"], batch["y"]), batch_idx)


class DictBatches(FederatedDataModule):
    def client_subset(self, *args):
        x, y = super().client_subset(*args)
        return {"y": y, "x": x}


def _private_client(x, y, privacy, batch_size=None, data_class=FederatedDataModule, module_class=LeastSquares):
    data = data_class(Fixed(x, y), batch_size=batch_size or len(y), val_fraction=0.0)  # batch >= data: sample rate 1
    data.setup(seed=0, device=torch.device("cpu"))
    privacy.setup(data, clients_per_round=1, planned=lambda: [])
    return ClientTrainer(Fabric(accelerator="cpu", devices=1), module_class(x.shape[1]), data, privacy)


def _clipped(g, c):
    return g * torch.clamp(c / g.norm(dim=1, keepdim=True), max=1.0)


X = torch.tensor([[3.0, 4.0, 0.0], [0.1, 0.2, 0.0], [0.0, 0.0, 2.0], [1.0, -1.0, 1.0]])
Y = torch.tensor([1, 0, 2, 1])


@pytest.mark.parametrize("physical", [None, 3])  # 3: the batch is evaluated in two chunks, clipped sums accumulated
@pytest.mark.parametrize("batches", ["tuples", "dicts"])
def test_every_per_example_gradient_is_clipped_to_c_before_the_sum(physical, batches):
    privacy = DPSGD(noise_multiplier=0.0, max_grad_norm=1.0, max_physical_batch_size=physical)
    classes = {"tuples": (FederatedDataModule, LeastSquares), "dicts": (DictBatches, DictLeastSquares)}[batches]
    client = _private_client(X, Y, privacy, None, *classes)
    w = torch.tensor([0.5, -0.5, 1.0])
    update = client.train(ClientPlan(client_id=0, round=0, seed=0, steps=1), w, torch.zeros(0))
    per_example = (X @ w - Y.float())[:, None] * X  # norms 7.5, 0.1, 2.0, 1.7
    expected = -_clipped(per_example, 1.0).sum(0) / len(Y)  # lr 1, every example sampled (rate 1)
    assert torch.allclose(update.delta, expected, atol=1e-6)
    assert not torch.allclose(update.delta, -per_example.mean(0), atol=1e-2)


def test_the_noise_has_std_noise_multiplier_times_c_over_the_expected_batch():
    d, n = 4000, 4
    privacy = DPSGD(noise_multiplier=0.8, max_grad_norm=2.0)
    client = _private_client(torch.zeros(n, d), torch.zeros(n, dtype=torch.long), privacy)  # zero gradients
    update = client.train(ClientPlan(client_id=0, round=0, seed=0, steps=1), torch.zeros(d), torch.zeros(0))
    noise = -update.delta * n
    assert abs(float(noise.std()) - 1.6) < 0.05 and abs(float(noise.mean())) < 0.08


def test_sam_under_dp_makes_both_gradients_private_and_never_mixes_their_per_example_gradients():
    """With noise 0 the step is exactly: G1 = clipped mean at w, e = rho G1/|G1|, G2 = clipped mean at w + e.
    Per-example gradients of the first evaluation leaking into the second would change G2 (or make Opacus raise)."""
    privacy = DPSGD(noise_multiplier=0.0, max_grad_norm=1.0)
    client = _private_client(X, Y, privacy)
    w = torch.tensor([0.5, -0.5, 1.0])
    plan = ClientPlan(client_id=0, round=0, seed=0, steps=1, rule=SharpnessAware(rho=0.5))
    update = client.train(plan, w, torch.zeros(0))

    def private_gradient(at):
        return _clipped((X @ at - Y.float())[:, None] * X, 1.0).sum(0) / len(Y)

    g1 = private_gradient(w)
    assert torch.allclose(update.delta, -private_gradient(w + 0.5 * g1 / g1.norm()), atol=1e-6)


def test_a_sam_step_is_accounted_as_one_gaussian_mechanism_of_its_two_releases():
    privacy = DPSGD(noise_multiplier=1.0, max_grad_norm=1.0)
    client = _private_client(X, Y, privacy, batch_size=2)
    plan = ClientPlan(client_id=0, round=0, seed=0, steps=3, rule=SharpnessAware(rho=0.1))
    client.train(plan, torch.zeros(3), torch.zeros(0))
    assert privacy.client_states.get(0, "privacy/accountant").tolist() == [[1.0 / math.sqrt(2.0), 0.5, 3.0]]


def _independent_epsilons(data, rounds, clients_per_round, steps, noise, delta=1e-5):
    """Each client's epsilon from a fresh Opacus accountant stepped once per local step it took."""
    data.setup(seed=0, device=torch.device("cpu"))
    epsilons = {}
    for round in range(rounds):
        for client_id in sample_clients(0, round, data.num_clients, clients_per_round):
            accountant = epsilons.setdefault(client_id, RDPAccountant())
            for _ in range(steps):
                accountant.step(noise_multiplier=noise, sample_rate=1 / math.ceil(data.client_size(client_id) / 16))
    return [accountant.get_epsilon(delta) for accountant in epsilons.values()]


def _model():
    L.seed_everything(0, verbose=False)
    return MLP(in_features=64, num_classes=10, optimizer=partial(torch.optim.SGD, lr=0.1))


def test_epsilon_continues_across_rounds_and_a_resume_and_equals_opacus_accountant(tmp_path):
    settings = dict(rounds=4, clients_per_round=3, local_steps=3)
    full = small_trainer(tmp_path / "full", **settings, privacy=DPSGD(noise_multiplier=1.1))
    uninterrupted = full.fit(model := _model(), small_data(), FedAvg())
    expected = _independent_epsilons(small_data(), 4, 3, 3, 1.1)
    assert uninterrupted["privacy/epsilon_max"] == pytest.approx(max(expected), rel=1e-9)
    assert uninterrupted["privacy/epsilon_mean"] == pytest.approx(sum(expected) / len(expected), rel=1e-9)

    small_trainer(tmp_path / "cut", **{**settings, "rounds": 2}, privacy=DPSGD(noise_multiplier=1.1)).fit(
        _model(), small_data(), FedAvg()
    )
    resumed = small_trainer(tmp_path / "cut", **settings, privacy=DPSGD(noise_multiplier=1.1))
    metrics = resumed.fit(resumed_model := _model(), small_data(), FedAvg(), ckpt_path="last")
    assert metrics["privacy/epsilon_max"] == uninterrupted["privacy/epsilon_max"]
    assert metrics["privacy/epsilon_mean"] == uninterrupted["privacy/epsilon_mean"]
    assert torch.equal(resumed_model.net[1].weight, model.net[1].weight)  # noise and sampling replayed too


def test_budget_mode_sets_each_clients_noise_to_spend_its_budget_over_the_planned_rounds(tmp_path):
    trainer = small_trainer(tmp_path, rounds=3, clients_per_round=2, local_steps=3, privacy=DPSGD(target_epsilon=4.0))
    metrics = trainer.fit(_model(), small_data(), FedAvg())
    assert 3.9 < metrics["privacy/epsilon_max"] <= 4.0
    checkpoint = torch.load(trainer.log_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["round"] == 3


def test_the_run_stops_cleanly_before_a_client_would_exceed_its_budget(tmp_path, capsys):
    after_two_rounds = max(_independent_epsilons(small_data(), 2, 8, 3, 1.0))
    after_three = max(_independent_epsilons(small_data(), 3, 8, 3, 1.0))
    budget = (after_two_rounds + after_three) / 2
    privacy = DPSGD(noise_multiplier=1.0, target_epsilon=budget)
    trainer = small_trainer(tmp_path, rounds=6, clients_per_round=8, local_steps=3, privacy=privacy)
    metrics = trainer.fit(_model(), small_data(), FedAvg())
    assert metrics["privacy/epsilon_max"] == pytest.approx(after_two_rounds, rel=1e-9)
    assert "would exceed its privacy budget in round 3: stopped after round 2" in capsys.readouterr().out
    checkpoint = torch.load(trainer.log_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["round"] == 2


class BatchNormNet(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(144, 10))

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.net(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_batchnorm_is_refused_with_the_option_to_convert_it(tmp_path):
    with pytest.raises(ConfigError, match="BatchNorm mixes the examples.*convert_batchnorm: true"):
        small_trainer(tmp_path, privacy=DPSGD(noise_multiplier=1.0)).fit(BatchNormNet(), small_data(), FedAvg())
    model = BatchNormNet()
    small_trainer(tmp_path, rounds=1, privacy=DPSGD(noise_multiplier=1.0, convert_batchnorm=True)).fit(
        model, small_data(), FedAvg()
    )
    assert isinstance(model.net[1], nn.GroupNorm)  # converted in place: the caller's model is the trained one


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
def test_16_bit_mixed_precision_is_refused(precision):
    with pytest.raises(ConfigError, match="differential privacy needs trainer.precision 32-true"):
        DPSGD(noise_multiplier=1.0).prepare(VGG11(), precision)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({}, "needs noise_multiplier or target_epsilon"),
        (dict(noise_multiplier=-1.0), "noise_multiplier must be >= 0"),
        (dict(noise_multiplier=1.0, max_grad_norm=0.0), "max_grad_norm must be > 0"),
        (dict(target_epsilon=1.0, target_delta=1.0), "target_delta must be in"),
    ],
)
def test_bad_privacy_settings_are_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        DPSGD(**settings)


@pytest.mark.skipif(importlib.util.find_spec("torchcsprng") is not None, reason="torchcsprng is installed")
def test_secure_mode_without_its_generator_is_refused_when_configured():
    with pytest.raises(
        ConfigError, match="secure_mode draws from Opacus' secure generator, which needs the torchcsprng"
    ):
        DPSGD(noise_multiplier=1.0, secure_mode=True)


def test_dp_is_configured_from_the_command_line_and_its_refusals_are_one_line(tmp_path, capsys):
    argv = [
        "fit",
        *config_options("configs/digits/base.yaml", "configs/digits/fedavg.yaml"),
        *trainer_options(root_dir=str(tmp_path), privacy="lightfed.privacy.DPSGD"),
        "--trainer.privacy.init_args.noise_multiplier",
        "1.0",
        *trainer_options(precision="bf16-mixed"),
    ]
    errors = refusal_lines(argv, capsys)
    assert len(errors) == 1
    assert errors[0].startswith("lightfed: error: differential privacy needs trainer.precision 32-true")


def test_the_prv_accountant_is_kept_per_client_like_rdp():
    from opacus.accountants import PRVAccountant

    privacy = DPSGD(noise_multiplier=1.0, accountant="prv")
    client = _private_client(X, Y, privacy, batch_size=2)
    for round in range(2):
        client.train(ClientPlan(client_id=0, round=round, seed=round, steps=3), torch.zeros(3), torch.zeros(0))
    independent = PRVAccountant()
    for _ in range(6):
        independent.step(noise_multiplier=1.0, sample_rate=0.5)
    assert privacy.epsilon(0) == pytest.approx(independent.get_epsilon(delta=1e-5), rel=1e-6)
