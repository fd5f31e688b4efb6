"""The one-shot estimate of epsilon from canary cosines (Andrew et al., ICLR 2024): a Gaussian fitted to the cosines
of the inserted canaries, one to those of fresh unobserved directions (or the null N(0, 1/d)), and the epsilon between
the two at the run's delta, with a bootstrap confidence bound over the canaries."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy.stats import bootstrap  # type: ignore[import-untyped]

from lightfed.audit.gaussian_epsilon import gaussian_epsilon

Null = Literal["fitted", "theory"]


@dataclass(frozen=True)
class CanaryEstimate:
    """The estimate, its confidence bound and the two fitted Gaussians."""

    epsilon: float  # epsilon between the null and the observed Gaussian at ``delta``
    upper: float  # the bootstrap's upper confidence bound on it (at ``confidence``)
    observed: tuple[float, float]  # (mean, std) of the inserted canaries' cosines
    null: tuple[float, float]  # (mean, std) of the unobserved directions' cosines (or of N(0, 1/d))
    confidence: float

    @property
    def margin(self) -> float:
        """How far the upper confidence bound lies above the estimate."""
        return self.upper - self.epsilon


def fitted(values: np.ndarray) -> tuple[float, float]:
    """Mean and std (ddof 1) of ``values``."""
    return float(np.mean(values)), float(np.std(values, ddof=1))


def null_gaussian(unobserved: np.ndarray, dim: int, null: Null) -> tuple[float, float]:
    """ "fitted": a Gaussian fitted to ``unobserved``; "theory": N(0, 1/dim), the law of the cosine of a random direction
    with a fixed vector in ``dim`` dimensions (up to O(1/dim))."""
    return fitted(unobserved) if null == "fitted" else (0.0, 1 / math.sqrt(dim))


def estimate_epsilon(
    observed: np.ndarray,
    unobserved: np.ndarray,
    delta: float,
    dim: int,
    null: Null = "fitted",
    confidence: float = 0.95,
    resamples: int = 200,
    seed: int = 0,
) -> CanaryEstimate:
    """The estimate from the inserted canaries' cosines ``observed`` and the unobserved directions' ``unobserved``
    (``null``: see ``null_gaussian``). ``upper``: the percentile bootstrap's one-sided ``confidence`` bound, resampling
    the cosines the Gaussians are fitted to (``resamples`` times, from ``seed``)."""
    if len(observed) < 2 or (null == "fitted" and len(unobserved) < 2):
        raise ValueError("the estimate needs at least 2 cosines of each kind")
    point = gaussian_epsilon(null_gaussian(unobserved, dim, null), fitted(observed), delta)
    upper = point
    if math.isfinite(point):
        statistic: Callable[..., Any]
        if null == "fitted":
            data: tuple[np.ndarray, ...] = (observed, unobserved)
            statistic = lambda obs, unobs: gaussian_epsilon(fitted(unobs), fitted(obs), delta)  # noqa: E731
        else:
            data, reference = (observed,), null_gaussian(unobserved, dim, null)
            statistic = lambda obs: gaussian_epsilon(reference, fitted(obs), delta)  # noqa: E731
        result = bootstrap(
            data,
            statistic,
            n_resamples=resamples,
            confidence_level=confidence,
            alternative="less",
            method="percentile",
            vectorized=False,
            rng=np.random.default_rng(seed),
        )
        upper = max(point, float(result.confidence_interval.high))
    return CanaryEstimate(point, upper, fitted(observed), null_gaussian(unobserved, dim, null), confidence)
