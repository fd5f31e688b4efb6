"""The canary estimate over seeds: for each seed a target run without noise and one at a noise multiplier, each
with canaries; per seed whether the estimate is at most the accountant's epsilon plus its margin, and the mean and
standard deviation over the seeds."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lightfed.audit.plan import AuditSettings, Setting, run_argv

Fit = Callable[[list[str]], tuple[dict[str, float], object, object]]


@dataclass(frozen=True)
class SeedRow:
    """One target run's epsilons."""

    seed: int
    noise: float
    accountant: float  # infinite without noise
    estimate: float
    upper: float

    @property
    def margin(self) -> float:
        return self.upper - self.estimate

    @property
    def holds(self) -> bool:
        """Whether the estimate is at most the accountant's epsilon plus its margin."""
        return self.estimate <= self.accountant + self.margin


def seed_rows(settings: AuditSettings, seeds: Sequence[int], noises: Sequence[float], fit: Fit) -> list[SeedRow]:
    """The target run of each seed at each noise multiplier (``fit``: ``subcommands.fit_in_process``)."""
    rows = []
    for seed in seeds:
        for noise in noises:
            of_seed = AuditSettings(**{**settings.__dict__, "seed": seed, "out": Path(settings.out) / f"seed{seed}"})
            metrics = fit(run_argv(of_seed, Setting(noise), None))[0]
            accountant = metrics.get("user_level_dp/epsilon", math.inf)
            estimate, upper = metrics["canaries/epsilon_estimate"], metrics["canaries/epsilon_upper"]
            rows.append(SeedRow(seed, noise, accountant, estimate, upper))
    return rows


def _number(value: float) -> str:
    return "∞" if value == math.inf else f"{value:.3g}"


def _mean_std(values: Sequence[float]) -> str:
    if not all(math.isfinite(v) for v in values):
        return "∞"
    mean, std = float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return f"{mean:.3g} ± {0.0 if std <= 1e-9 * abs(mean) else std:.2g}"


def seed_tables(rows: Sequence[SeedRow]) -> str:
    """Markdown: one line per run, then per noise multiplier the mean ± std (ddof 1) over the seeds."""
    lines = ["| seed | z | ε accountant | ε estimate | margin | holds |", "|---|---|---|---|---|---|"]
    for r in rows:
        cells = [str(r.seed), f"{r.noise:g}", _number(r.accountant), _number(r.estimate), _number(r.margin)]
        lines.append("| " + " | ".join([*cells, "yes" if r.holds else "no"]) + " |")
    lines += ["", "| z | seeds | ε accountant | ε estimate | margin | holds |", "|---|---|---|---|---|---|"]
    for noise in dict.fromkeys(r.noise for r in rows):
        of = [r for r in rows if r.noise == noise]
        held = sum(r.holds for r in of)
        cells = [f"{noise:g}", str(len(of)), _mean_std([r.accountant for r in of])]
        cells += [_mean_std([r.estimate for r in of]), _mean_std([r.margin for r in of]), f"{held} of {len(of)}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
