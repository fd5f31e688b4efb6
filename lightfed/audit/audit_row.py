"""One row of an audit: the target run and its shadows trained, and what they show."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from lightfed.audit.attacks import example_level, lira_scores, loss_scores, user_level
from lightfed.audit.membership import AttackResult
from lightfed.audit.plan import AuditSettings, Setting, members, run_argv
from lightfed.audit.silent_clients import silent_half
from lightfed.audit.statistics import ClientStatistics, all_statistics

Fit = Callable[[list[str]], tuple[dict[str, float], object, object]]


@dataclass(frozen=True)
class RowResult:
    """The numbers of one row."""

    label: str
    noise: float | None
    accountant_epsilon: float  # infinite without noise
    estimate: float  # the canary estimate (nan without DP: no canaries)
    estimate_upper: float
    val_acc: float
    attacks: dict[str, AttackResult]  # "loss/example", "loss/user", "lira/example", "lira/user"


def _trained(fit: Fit, argv: list[str]) -> tuple[dict[str, float], list[ClientStatistics]]:
    metrics, module, data = fit(argv)
    return metrics, all_statistics(module, data)  # type: ignore[arg-type]


def audit_row(
    settings: AuditSettings, setting: Setting, fit: Fit, say: Callable[[str], None], fpr: float, confidence: float
) -> RowResult:
    """Trains the row's target and shadow runs (``fit``: ``subcommands.fit_in_process``) and attacks the target."""
    began = time.perf_counter()
    metrics, target = _trained(fit, run_argv(settings, setting, None))
    say(f"{setting.label}: target trained ({time.perf_counter() - began:.0f} s)")
    shadows = []
    for shadow in range(settings.shadows):
        shadows.append(_trained(fit, run_argv(settings, setting, shadow))[1])
        say(f"{setting.label}: shadow {shadow + 1}/{settings.shadows} trained ({time.perf_counter() - began:.0f} s)")
    out_of = [silent_half(len(target), s, settings.seed) for s in range(settings.shadows)]
    member = members(len(target), settings.unseen_clients)
    attacks = {}
    for name, scores in (("loss", loss_scores(target)), ("lira", lira_scores(target, shadows, out_of))):
        attacks[f"{name}/example"] = example_level(scores, member, settings.delta, fpr, confidence)
        attacks[f"{name}/user"] = user_level(scores, member, settings.delta, fpr, confidence)
    return RowResult(
        setting.label,
        setting.noise,
        metrics.get("user_level_dp/epsilon", math.inf),
        metrics.get("canaries/epsilon_estimate", math.nan),
        metrics.get("canaries/epsilon_upper", math.nan),
        metrics.get("val_acc", math.nan),
        attacks,
    )
