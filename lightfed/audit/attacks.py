"""The membership-inference attacks on a target model: loss threshold (Yeom et al. 2018) and offline LiRA (Carlini et
al. 2022) with shadow models, each example-level (a member client's training examples against its held-out share)
and user-level (the clients the run samples from against those it never trains)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from lightfed.audit.membership import AttackResult, attack_result
from lightfed.audit.statistics import ClientStatistics

Variance = Literal["global", "per_example"]


def loss_scores(stats: Sequence[ClientStatistics]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per client, (held-in, held-out) scores of the loss attack: the negated loss."""
    return [(-s.loss_in, -s.loss_out) for s in stats]


def lira_scores(
    target: Sequence[ClientStatistics],
    shadows: Sequence[Sequence[ClientStatistics]],
    out_of: Sequence[np.ndarray],
    variance: Variance = "global",
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per client, (held-in, held-out) scores of offline LiRA: (phi - mu_out) / sigma_out, mu_out the mean of phi over
    the shadows that did not train on the client (``out_of[s][k]``: shadow s left client k out). ``variance``:
    "per_example": sigma_out each example's own (Carlini et al.'s, from many shadows); "global": one sigma pooled
    over every example (Carlini et al.'s fixed variance, for few shadows)."""
    residuals, means = [], []
    for k in range(len(target)):
        outs = [shadows[s][k] for s in range(len(shadows)) if out_of[s][k]]
        if not outs:
            raise ValueError(f"client {k} is in every shadow: LiRA needs a shadow without it")
        phis = [np.stack([getattr(o, part) for o in outs]) for part in ("phi_in", "phi_out")]
        means.append([p.mean(axis=0) for p in phis])
        residuals.append([p - p.mean(axis=0) for p in phis])
    pooled = np.concatenate([r.ravel() for pair in residuals for r in pair])
    sigma = max(float(np.sqrt(np.mean(pooled**2))), 1e-12)
    scores = []
    for k, s in enumerate(target):
        own = [np.maximum(np.sqrt(np.mean(r**2, axis=0)), 1e-12) for r in residuals[k]]
        scale = own if variance == "per_example" else [sigma, sigma]
        scores.append(((s.phi_in - means[k][0]) / scale[0], (s.phi_out - means[k][1]) / scale[1]))
    return scores


def example_level(
    scores: Sequence[tuple[np.ndarray, np.ndarray]], members: np.ndarray, delta: float, fpr: float, confidence: float
) -> AttackResult:
    """The member clients' training examples against their held-out examples."""
    held_in = np.concatenate([scores[k][0] for k in np.flatnonzero(members).tolist()])
    held_out = np.concatenate([scores[k][1] for k in np.flatnonzero(members).tolist()])
    return attack_result(held_in, held_out, delta, fpr, confidence)


def user_level(
    scores: Sequence[tuple[np.ndarray, np.ndarray]], members: np.ndarray, delta: float, fpr: float, confidence: float
) -> AttackResult:
    """Each client's mean score over the examples it trains on (or would): member clients against the others."""
    means = np.array([scores[k][0].mean() for k in range(len(scores))])
    return attack_result(means[members], means[~members], delta, fpr, confidence)
