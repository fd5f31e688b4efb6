"""What a membership-inference attack's scores show: its true-positive rate at a false-positive rate, its advantage,
and the epsilon lower bound its error rates imply (with Clopper-Pearson bounds on both)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest  # type: ignore[import-untyped]


@dataclass(frozen=True)
class AttackResult:
    """One attack on members and non-members: higher scores are guessed members."""

    auc: float
    advantage: float  # max over thresholds of TPR - FPR
    tpr_at_fpr: float  # the best TPR at an FPR of at most ``fpr``
    fpr: float
    epsilon_lower: float  # the lower bound at ``confidence`` (0 where none holds)
    confidence: float


def rates(members: np.ndarray, nonmembers: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(true positives, false positives, thresholds) of "score >= threshold" at every distinct score, from the
    highest threshold down (each count an integer)."""
    thresholds = np.unique(np.concatenate([members, nonmembers]))[::-1]
    tp = (members[None, :] >= thresholds[:, None]).sum(axis=1)
    fp = (nonmembers[None, :] >= thresholds[:, None]).sum(axis=1)
    return tp, fp, thresholds


def tpr_at_fpr(members: np.ndarray, nonmembers: np.ndarray, fpr: float) -> float:
    """The largest TPR of a threshold whose FPR is at most ``fpr`` (0 if none)."""
    tp, fp, _ = rates(members, nonmembers)
    allowed = fp / len(nonmembers) <= fpr
    return float(tp[allowed].max() / len(members)) if allowed.any() else 0.0


def clopper_pearson(successes: int, trials: int, confidence: float) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval of a binomial proportion at ``confidence``."""
    interval = binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="exact")
    return float(interval.low), float(interval.high)


def epsilon_lower_bound(tp: int, members: int, fp: int, nonmembers: int, delta: float, confidence: float) -> float:
    """The epsilon that a test with ``tp`` of ``members`` and ``fp`` of ``nonmembers`` guessed members proves:
    max(log((TPR_lo - delta) / FPR_hi), log((1 - delta - FPR_hi) / (1 - TPR_lo))), TPR_lo and FPR_hi the ends of
    their Clopper-Pearson intervals at ``confidence`` (both hold together with probability at least ``confidence``);
    0 where neither is positive."""
    tpr_lo, _ = clopper_pearson(tp, members, confidence)
    _, fpr_hi = clopper_pearson(fp, nonmembers, confidence)
    bounds = [0.0]
    if tpr_lo - delta > 0 and fpr_hi > 0:
        bounds.append(math.log((tpr_lo - delta) / fpr_hi))
    if 1 - delta - fpr_hi > 0 and tpr_lo < 1:
        bounds.append(math.log((1 - delta - fpr_hi) / (1 - tpr_lo)))
    return max(bounds)


def attack_result(
    members: np.ndarray, nonmembers: np.ndarray, delta: float, fpr: float = 0.1, confidence: float = 0.95
) -> AttackResult:
    """The attack's AUC, advantage, TPR at ``fpr`` and its best epsilon lower bound over thresholds (the threshold
    is chosen on the same scores: the bound's confidence holds for a threshold fixed in advance)."""
    if len(members) == 0 or len(nonmembers) == 0:
        raise ValueError("an attack needs at least one member and one non-member")
    tp, fp, _ = rates(members, nonmembers)
    tpr, fprs = tp / len(members), fp / len(nonmembers)
    auc = float(np.trapezoid(np.concatenate([[0.0], tpr]), np.concatenate([[0.0], fprs])))
    best = max(
        epsilon_lower_bound(int(t), len(members), int(f), len(nonmembers), delta, confidence)
        for t, f in zip(tp, fp, strict=True)
    )
    return AttackResult(auc, float(np.max(tpr - fprs)), tpr_at_fpr(members, nonmembers, fpr), fpr, best, confidence)
