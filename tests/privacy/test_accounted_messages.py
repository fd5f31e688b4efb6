"""Everything a client sends besides its delta is declared (``Requirements.sends``), and a run with an accounting
privacy mechanism is refused, in one line naming the message and the option that removes it, when a message is
computed from the client's data outside the accountant."""

import pytest
import torch

from lightfed.callbacks import Callback
from lightfed.core.transforms import Pipeline
from lightfed.errors import ConfigError
from lightfed.personalization import APFL, Ditto, Personalized
from lightfed.privacy import DPSGD, ClippedGaussianNoise
from lightfed.strategies import (
    AdaptFed,
    AdaptiveFedECADO,
    FedAvg,
    FedECADO,
    FedNova,
    FedProx,
    FedSAM,
    Scaffold,
)
from lightfed.strategies.requirements import check_requirements, run_requirements
from tests.conftest import config_options, refusal_lines, small_data, small_model, small_trainer, trainer_options

SGD = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


@pytest.mark.parametrize(
    "strategy, message",
    [
        (
            FedECADO(),
            "FedECADO's clients send curvature computed from their data outside trainer.privacy's accountant "
            "\\(no epsilon would cover it\\): set strategy.curvature: none",
        ),
        (FedECADO(curvature="diagonal", beyond_window="decay"), "FedECADO's clients send curvature computed"),
        (
            AdaptiveFedECADO(),
            "AdaptiveFedECADO's clients send decay, forced, max_lte, passivity_bound, rejected, "
            "steps, window computed .*: no option stops them: run AdaptiveFedECADO without",
        ),
        (AdaptFed(), "AdaptFed's clients send history, lr, probe_loss, rp computed .*: no option stops them"),
    ],
)
def test_a_message_outside_the_accountant_is_refused_with_dp_sgd(strategy, message):
    with pytest.raises(ConfigError, match=message):
        check_requirements(strategy, SGD, DPSGD(noise_multiplier=1.0))
    check_requirements(strategy, SGD)  # without privacy: allowed


@pytest.mark.parametrize(
    "strategy",
    [
        FedECADO(curvature="none"),  # time_scale (batch size / client size) only
        FedECADO(curvature="none", beyond_window="decay"),  # decay: from the private gradients' norms
        FedAvg(),
        Scaffold(),
        FedNova(),
        FedSAM(),
    ],
)
def test_a_run_whose_messages_are_sizes_or_private_gradients_is_allowed_with_dp_sgd(strategy):
    check_requirements(strategy, SGD, DPSGD(noise_multiplier=1.0))


def test_adaptfed_with_its_papers_mechanism_is_allowed_it_reports_no_epsilon():
    check_requirements(AdaptFed(), SGD, ClippedGaussianNoise())


def test_personal_weights_stay_with_their_client_and_are_allowed_with_dp_sgd():
    check_requirements(FedAvg(), SGD, DPSGD(noise_multiplier=1.0), transforms=Pipeline([APFL()]))


def test_fedecado_without_curvature_trains_under_dp_sgd_and_logs_epsilon(tmp_path):
    trainer = small_trainer(tmp_path, rounds=1, clients_per_round=2, local_steps=2, privacy=DPSGD(noise_multiplier=1.0))
    metrics = trainer.fit(small_model(momentum=0.0), small_data(), FedECADO(curvature="none"))
    assert metrics["privacy/epsilon_max"] > 0


def test_the_refusal_from_the_command_line_is_one_line(tmp_path, capsys):
    configs = config_options("configs/digits/base.yaml", "configs/digits/fedecado.yaml", "configs/privacy/dp-sgd.yaml")
    errors = refusal_lines(["fit", *configs, *trainer_options(root_dir=str(tmp_path))], capsys)
    assert len(errors) == 1
    assert errors[0].startswith("lightfed: error: FedECADO's clients send curvature computed from their data")


class Reports(Callback):
    def __init__(self):
        self.keys = set()

    def on_client_end(self, trainer, update):
        self.keys |= set(update.report)


@pytest.mark.parametrize(
    "strategy",
    [
        FedAvg(),
        FedProx(),
        FedSAM(),
        Scaffold(),
        FedNova(),
        AdaptFed(),
        FedECADO(curvature="diagonal", beyond_window="decay"),
        FedECADO(curvature="none"),
        AdaptiveFedECADO(beyond_window="decay"),
        Ditto(lam=0.1),  # personalization: a transform in front of FedAvg
        APFL(alpha_lr=0.1),
    ],
)
def test_every_value_a_client_reports_is_declared(tmp_path, strategy):
    reports = Reports()
    trainer = small_trainer(tmp_path, rounds=1, clients_per_round=2, local_steps=2, callbacks=[reports])
    strategy, transforms = (FedAvg(), [strategy]) if isinstance(strategy, Personalized) else (strategy, [])
    trainer.fit(small_model(momentum=0.0), small_data(), strategy, transforms=transforms)
    needs = run_requirements(strategy, transforms=Pipeline(transforms))
    assert reports.keys <= needs.sent_names
    assert bool(reports.keys) == bool(needs.sends)
