"""The done-when of the canary estimate on the embedded digits, over seeds (scripts/studies/canary_seeds.py runs
more): without noise it finds a large epsilon; with a noise multiplier whose accountant epsilon is small, it is at
most that epsilon plus its confidence margin."""

import pytest

from lightfed.audit.plan import AuditSettings, Setting, run_argv
from lightfed.audit.seeds import SeedRow, seed_rows, seed_tables
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


def test_over_seeds_the_estimate_is_large_without_noise_and_within_the_bound_with_much_noise(tmp_path):
    settings = AuditSettings((CONFIG,), tmp_path, rounds=10, canaries=50, unobserved=50)
    rows = seed_rows(settings, seeds=[1, 2], noises=[0.0, 8.0], fit=fit_in_process)
    assert [(r.seed, r.noise) for r in rows] == [(1, 0.0), (1, 8.0), (2, 0.0), (2, 8.0)]
    assert all(r.estimate > 5 for r in rows if r.noise == 0)
    assert all(r.accountant < 1 and r.holds for r in rows if r.noise == 8)
    summary = seed_tables(rows).splitlines()
    assert summary[-1].startswith("| 8 | 2 | ") and summary[-1].endswith("| 2 of 2 |")
    assert summary[-2].startswith("| 0 | 2 | ∞ | ")


def test_a_seed_whose_estimate_exceeds_the_bound_is_counted():
    rows = [SeedRow(0, 1.0, 1.0, 0.5, 0.9), SeedRow(1, 1.0, 1.0, 2.0, 2.5)]  # 2.0 > 1.0 + 0.5
    assert [r.holds for r in rows] == [True, False]
    assert seed_tables(rows).splitlines()[-1] == "| 1 | 2 | 1 ± 0 | 1.25 ± 1.1 | 0.45 ± 0.071 | 1 of 2 |"
