import json
import math

import numpy as np
import pytest

from lightfed.audit.audit_row import RowResult
from lightfed.audit.command import main
from lightfed.audit.membership import attack_result
from lightfed.audit.plan import AuditSettings, Setting, run_argv
from lightfed.audit.report import ATTACKS, markdown_table
from lightfed.errors import ConfigError
from tests.test_import_graph import ROOT

CONFIG = str(ROOT.parent / "configs/privacy/audit-digits.yaml")


def never_fit(argv):
    raise AssertionError("a bad audit must be refused before any run")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-c", CONFIG, "--shadows", "3"], "--shadows must be even"),
        (["-c", CONFIG, "--noise", "-1"], "--noise values must be >= 0"),
        (["-c", CONFIG, "--holdout", "1"], "--holdout must be in"),
        (["-c", "missing.yaml"], "config file not found: missing.yaml"),
        (["-c", str(ROOT.parent / "configs/privacy/user-level-fixed.yaml")], "sets transforms:"),
    ],
)
def test_bad_input_is_refused_in_one_line(argv, message):
    with pytest.raises(ConfigError, match=message):
        main(argv, fit=never_fit)


def test_the_table_shows_each_setting_and_attack():
    attack = attack_result(np.array([1.0, 0.9]), np.array([0.0, 0.5]), 1e-5)  # separated: advantage 1
    row = RowResult("z=1", 1.0, 2.5, 0.8, 3.1, 0.7, {name: attack for name in ATTACKS})
    baseline = RowResult("none", None, math.inf, math.nan, math.nan, 0.9, {name: attack for name in ATTACKS})
    lines = markdown_table([baseline, row], fpr=0.1, confidence=0.95).splitlines()
    assert lines[2].startswith("| none | ∞ | — | — | 0.9 | 1.000 | 1.000 |")
    assert lines[3].startswith("| z=1 | 2.5 | 0.8 | 3.1 | 0.7 | 1.000 |")


def test_each_shadow_shares_its_targets_seed_but_draws_noise_of_its_own(tmp_path):
    """The shadows see the target's data and cohorts (one trainer seed) but not its noise, which LiRA would otherwise
    subtract: each one's UserLevelDP has a noise seed of its own, the target's none (the trainer seed)."""
    settings = AuditSettings((CONFIG,), tmp_path, seed=3)

    def user_level(argv):
        assert argv[argv.index("--seed_everything") + 1] == "3"
        transforms = json.loads(argv[argv.index("--transforms") + 1])
        return next(t["init_args"] for t in transforms if t["class_path"].endswith("UserLevelDP"))

    seeds = [user_level(run_argv(settings, Setting(1.0), shadow)).get("noise_seed") for shadow in (None, 0, 1, 2)]
    assert seeds[0] is None and len(set(seeds[1:])) == 3 and 3 not in seeds
