import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.stats import norm

from lightfed.audit.gaussian_epsilon import gaussian_delta, gaussian_epsilon


def balle_wang_delta(mu: float, epsilon: float) -> float:
    """The Gaussian mechanism's delta(epsilon) at sensitivity / noise ``mu`` (Balle and Wang 2018, Theorem 8)."""
    return float(norm.cdf(-epsilon / mu + mu / 2) - np.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2))


@pytest.mark.parametrize("mu, epsilon", [(0.5, 0.3), (1.0, 1.0), (3.0, 4.0)])
def test_equal_variances_give_the_gaussian_mechanisms_curve(mu, epsilon):
    assert gaussian_delta((0.0, 1.0), (mu, 1.0), epsilon) == pytest.approx(balle_wang_delta(mu, epsilon), abs=1e-12)
    # scaled: only mu / std matters
    assert gaussian_delta((0.0, 0.1), (mu / 10, 0.1), epsilon) == pytest.approx(balle_wang_delta(mu, epsilon), abs=1e-9)


def test_epsilon_at_delta_inverts_the_curve():
    delta = balle_wang_delta(2.0, 3.0)
    assert gaussian_epsilon((0.0, 1.0), (2.0, 1.0), delta) == pytest.approx(3.0, abs=1e-5)


def test_unequal_variances_against_numerical_integration():
    p, q, epsilon = (0.0, 1.0), (0.5, 0.6), 0.8

    def excess(first, second):
        integrand = lambda x: max(0.0, norm.pdf(x, *first) - math.exp(epsilon) * norm.pdf(x, *second))  # noqa: E731
        return quad(integrand, -30, 30, points=[-3, 0, 0.5, 3], limit=200)[0]

    assert gaussian_delta(p, q, epsilon) == pytest.approx(max(excess(p, q), excess(q, p)), abs=1e-7)


def test_identical_gaussians_have_epsilon_zero_and_distinct_point_masses_infinite():
    assert gaussian_epsilon((0.1, 0.2), (0.1, 0.2), 1e-5) == 0.0
    assert gaussian_epsilon((0.0, 0.0), (1.0, 0.0), 1e-5) == math.inf
