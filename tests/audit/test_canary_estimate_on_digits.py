"""The done-when of the canary estimate on the embedded digits, one seed (scripts/studies/canary_seeds.py runs
several): without noise it finds a large epsilon; with a noise multiplier whose accountant epsilon is small, it is at
most that epsilon plus its confidence margin."""

import pytest

from lightfed.audit.plan import AuditSettings, Setting, run_argv
from lightfed.subcommands import fit_in_process
from tests.test_import_graph import ROOT  # lightfed/

CONFIG = str(ROOT.parent / "configs/privacy/audit-digits.yaml")


def canary_run(tmp_path, noise: float) -> dict[str, float]:
    settings = AuditSettings((CONFIG,), tmp_path, rounds=10, canaries=50, unobserved=50)
    return fit_in_process(run_argv(settings, Setting(noise), None))[0]


def test_without_noise_the_estimate_is_large(tmp_path):
    metrics = canary_run(tmp_path, 0.0)
    assert "user_level_dp/epsilon" not in metrics  # infinite: the accountant logs none
    assert metrics["canaries/epsilon_estimate"] > 5  # infinite in truth; its ceiling: the spread of insertion counts


def test_with_much_noise_the_estimate_stays_within_the_accountants_epsilon_and_its_margin(tmp_path):
    metrics = canary_run(tmp_path, 8.0)
    accountant = metrics["user_level_dp/epsilon"]
    assert accountant < 1
    margin = metrics["canaries/epsilon_upper"] - metrics["canaries/epsilon_estimate"]
    assert metrics["canaries/epsilon_estimate"] <= accountant + margin
    assert metrics["canaries/epsilon_estimate"] == pytest.approx(0, abs=accountant + margin)
