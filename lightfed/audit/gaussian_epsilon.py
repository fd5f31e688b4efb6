"""Epsilon between two Gaussians: the (epsilon, delta) curve of the pair N(m0, s0^2), N(m1, s1^2) as a mechanism's
outputs on two neighbouring inputs, and the epsilon at a delta."""

from __future__ import annotations

import math

from scipy.optimize import brentq  # type: ignore[import-untyped]
from scipy.special import ndtr  # type: ignore[import-untyped]

EPSILON_CAP = 500.0  # past this the curve is reported as infinite


def _excess_region(p: tuple[float, float], q: tuple[float, float], epsilon: float) -> list[tuple[float, float]]:
    """The intervals where log p(x) - log q(x) > epsilon, for p and q given as (mean, std)."""
    (m0, s0), (m1, s1) = p, q
    a = 1 / (2 * s1**2) - 1 / (2 * s0**2)
    b = m0 / s0**2 - m1 / s1**2
    c = m1**2 / (2 * s1**2) - m0**2 / (2 * s0**2) + math.log(s1 / s0) - epsilon
    if abs(a) < 1e-12 * max(abs(b), 1.0):  # equal variances: a half-line
        if b == 0:
            return [(-math.inf, math.inf)] if c > 0 else []
        root = -c / b
        return [(root, math.inf)] if b > 0 else [(-math.inf, root)]
    disc = b * b - 4 * a * c
    if disc <= 0:
        return [(-math.inf, math.inf)] if a > 0 else []
    r1, r2 = sorted(((-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)))
    return [(-math.inf, r1), (r2, math.inf)] if a > 0 else [(r1, r2)]


def _mass(intervals: list[tuple[float, float]], mean: float, std: float) -> float:
    return float(sum(ndtr((hi - mean) / std) - ndtr((lo - mean) / std) for lo, hi in intervals))


def _one_way_delta(p: tuple[float, float], q: tuple[float, float], epsilon: float) -> float:
    """sup over events A of P(A) - e^epsilon Q(A), attained on the excess region."""
    region = _excess_region(p, q, epsilon)
    p_mass, q_mass = _mass(region, *p), _mass(region, *q)
    scaled = math.exp(epsilon + math.log(q_mass)) if q_mass > 0 else 0.0
    return max(0.0, p_mass - scaled)


def gaussian_delta(p: tuple[float, float], q: tuple[float, float], epsilon: float) -> float:
    """delta(epsilon) of the pair: the larger of both orders, for p and q given as (mean, std)."""
    return max(_one_way_delta(p, q, epsilon), _one_way_delta(q, p, epsilon))


def gaussian_epsilon(p: tuple[float, float], q: tuple[float, float], delta: float) -> float:
    """The smallest epsilon >= 0 with delta(epsilon) <= ``delta`` for the pair (mean, std) ``p`` and ``q``; infinite
    past ``EPSILON_CAP`` (or when a std is 0 and the means differ)."""
    if p[1] <= 0 or q[1] <= 0:
        return 0.0 if p == q else math.inf
    gap = lambda epsilon: gaussian_delta(p, q, epsilon) - delta  # noqa: E731
    if gap(0.0) <= 0:
        return 0.0
    high = 1.0
    while gap(high) > 0:
        if high >= EPSILON_CAP:
            return math.inf
        high = min(2 * high, EPSILON_CAP)
    return float(brentq(gap, high / 2 if high > 1 else 0.0, high, xtol=1e-6))
