import math

import numpy as np
import pytest

from lightfed.audit.audit_row import RowResult
from lightfed.audit.command import main
from lightfed.audit.membership import attack_result
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
