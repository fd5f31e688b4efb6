"""Privacy settings that cannot train as asked are refused before training, in one line, with nothing written: a
budget without noise, a budget that round 1 alone exceeds, secure aggregation that cannot unmask a round."""

import re
from pathlib import Path

import pytest
import torch
from opacus.accountants import RDPAccountant

from lightfed.cli import main
from lightfed.errors import ConfigError
from lightfed.privacy import SecureAggregation, UserLevelDP
from lightfed.strategies import FedAvg
from tests.transforms.pipeline_round import set_up

ROOT = Path(__file__).resolve().parents[2]
SECAGG = str(ROOT / "configs" / "privacy" / "secagg.yaml")
DIGITS = str(ROOT / "configs" / "digits" / "base.yaml")
USER_LEVEL = str(ROOT / "configs" / "privacy" / "user-level-fixed.yaml")
DP = str(ROOT / "configs" / "privacy" / "dp-sgd.yaml")


def _epsilon(noise_multiplier: float, sample_rate: float, steps: int = 1) -> float:
    accountant = RDPAccountant()
    accountant.history = [(noise_multiplier, sample_rate, steps)]
    return accountant.get_epsilon(delta=1e-5)


def _refusal(argv: list[str], tmp_path, capsys, monkeypatch, rounds: int = 1) -> str:
    """The one line ``lightfed fit`` on digits (``rounds`` rounds) ends with, exit status 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        main(
            ["fit", "-c", DIGITS, *argv, "--trainer.rounds", str(rounds), "--trainer.root_dir", str(tmp_path / "runs")]
        )
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1 and err.startswith("lightfed: error: "), err
    assert not any(tmp_path.iterdir())  # no run folder
    return err


def test_user_level_dp_refuses_a_budget_without_noise(tmp_path, capsys, monkeypatch):
    argv = [
        "-c",
        USER_LEVEL,
        "--transforms.init_args.noise_multiplier",
        "0",
        "--transforms.init_args.target_epsilon",
        "5",
    ]
    err = _refusal(argv, tmp_path, capsys, monkeypatch)
    assert "UserLevelDP's target_epsilon needs noise: with noise_multiplier 0 epsilon is infinite from round 1" in err


def test_user_level_dp_refuses_a_budget_that_round_1_alone_exceeds(tmp_path, capsys, monkeypatch):
    first = _epsilon(1.0, 10 / 20)  # digits: 10 of 20 clients a round
    err = _refusal(["-c", USER_LEVEL, "--transforms.init_args.target_epsilon", "3"], tmp_path, capsys, monkeypatch)
    assert (
        f"UserLevelDP's target_epsilon 3 is spent by round 1 alone: one round of noise_multiplier 1 at sampling rate "
        f"0.5 has epsilon {first:.4g} (delta 1e-05); raise its noise_multiplier or target_epsilon, or lower "
        "trainer.clients_per_round"
    ) in err


@pytest.mark.parametrize("sampling", [dict(), dict(sampling="poisson", sample_rate=0.25)])
def test_user_level_dp_takes_a_budget_that_round_1_fits_in(sampling):
    first = _epsilon(1.0, 0.25)
    clients = 8 if sampling else 2  # fixed: 2 of 8 a round

    def setup(target_epsilon: float) -> None:
        dp = UserLevelDP(noise_multiplier=1.0, target_epsilon=target_epsilon, **sampling)
        set_up(FedAvg(), [dp], torch.zeros(3), 8, clients_per_round=clients)

    setup(first * 1.001)
    lower = "UserLevelDP's sample_rate" if sampling else "trainer.clients_per_round"
    with pytest.raises(ConfigError, match=f"has epsilon {first:.4g} .*, or lower {lower}$"):
        setup(first * 0.999)


def test_dp_sgd_refuses_a_budget_without_noise(tmp_path, capsys, monkeypatch):
    argv = ["-c", DP, "--trainer.privacy.noise_multiplier", "0", "--trainer.privacy.target_epsilon", "5"]
    err = _refusal(argv, tmp_path, capsys, monkeypatch)
    assert "trainer.privacy.target_epsilon needs noise: with noise_multiplier 0 epsilon is infinite" in err


def test_dp_sgd_refuses_a_budget_that_a_client_of_round_1_exceeds(tmp_path, capsys, monkeypatch):
    err = _refusal(["-c", DP, "--trainer.privacy.target_epsilon", "1"], tmp_path, capsys, monkeypatch)
    found = re.search(
        r"client \d+'s (\d+) steps of noise_multiplier 1 at sample rate ([\d.]+) have epsilon ([\d.]+)", err
    )
    assert "trainer.privacy.target_epsilon 1 is spent by round 1 alone" in err and found, err
    steps, rate, epsilon = int(found[1]), float(found[2]), float(found[3])
    assert epsilon == pytest.approx(_epsilon(1.0, 1 / round(1 / rate), steps), rel=1e-3)  # Opacus' accountant
    assert epsilon > 1 and "raise trainer.privacy.noise_multiplier or target_epsilon" in err


def test_secure_aggregation_refuses_up_front_the_first_round_it_cannot_unmask():
    def setup(rounds: int) -> None:
        secure = SecureAggregation(neighbours=2, dropout=0.2, threshold=0.5)
        set_up(FedAvg(), [secure], torch.zeros(4), 20, clients_per_round=10, rounds=rounds)

    setup(rounds=1)  # with this seed round 1 unmasks, round 2 does not
    with pytest.raises(ConfigError, match="cannot unmask round 2: .* lower SecureAggregation's dropout or threshold"):
        setup(rounds=30)


def test_secure_aggregation_that_cannot_unmask_a_later_round_is_refused_before_training(tmp_path, capsys, monkeypatch):
    argv = [
        "-c",
        SECAGG,
        "--transforms.init_args.neighbours",
        "2",
        "--transforms.init_args.dropout",
        "0.2",
        "--transforms.init_args.threshold",
        "0.5",
    ]
    err = _refusal(argv, tmp_path, capsys, monkeypatch, rounds=3)
    assert "secure aggregation cannot unmask round 2" in err
