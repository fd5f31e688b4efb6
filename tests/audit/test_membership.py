import math

import numpy as np
import pytest
from scipy.stats import beta

from lightfed.audit.membership import attack_result, clopper_pearson, epsilon_lower_bound, tpr_at_fpr

MEMBERS = np.array([0.9, 0.8, 0.7, 0.2])
NONMEMBERS = np.array([0.6, 0.3, 0.1, 0.05, 0.0])


def test_tpr_at_fpr_and_advantage_by_hand():
    # threshold 0.6: members 0.9, 0.8, 0.7 (3/4) and non-member 0.6 (1/5); threshold 0.7: 3/4 and 0/5
    assert tpr_at_fpr(MEMBERS, NONMEMBERS, 0.2) == 0.75
    assert tpr_at_fpr(MEMBERS, NONMEMBERS, 0.0) == 0.75
    # threshold 0.2 takes every member at FPR 2/5
    assert tpr_at_fpr(MEMBERS, NONMEMBERS, 0.4) == 1.0
    result = attack_result(MEMBERS, NONMEMBERS, delta=1e-5)
    assert result.advantage == pytest.approx(0.75)  # 3/4 - 0/5
    # AUC: 18 of the 20 (member, non-member) pairs ranked right (0.2 is below 0.6 and 0.3)
    assert result.auc == pytest.approx(18 / 20)


def test_clopper_pearson_with_no_success_is_the_closed_form():
    low, high = clopper_pearson(0, 5, 0.95)
    assert low == 0.0
    assert high == pytest.approx(1 - 0.025 ** (1 / 5))


def test_epsilon_lower_bound_against_the_beta_quantiles():
    delta = 1e-5
    tpr_low = beta.ppf(0.025, 90, 100 - 90 + 1)  # Clopper-Pearson's ends are beta quantiles
    fpr_high = beta.ppf(0.975, 1 + 1, 100 - 1)
    expected = math.log((tpr_low - delta) / fpr_high)
    assert epsilon_lower_bound(90, 100, 1, 100, delta, 0.95) == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(math.log(0.8238 / 0.0545), abs=0.01)


def test_a_test_no_better_than_chance_proves_nothing():
    assert epsilon_lower_bound(50, 100, 50, 100, 1e-5, 0.95) == 0.0
