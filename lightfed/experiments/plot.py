"""The plot of a comparison: the metric against the round, one line per (config, setting)."""

import statistics
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = ("png", "pdf", "svg")
LINESTYLES = ("-", "--", "-.", ":")
TITLE_WIDTH = 100  # characters of a title line: the overrides of every run wrap there
MARKERS = ("o", "s", "^", "D", "v", "x", "*")  # 4 x 7: the first 28 curves differ in line style and marker both


def plot_curves(
    curves: dict[str, list[list[list[float]]]], metric: str, target: float | None, path: Path, fixed: str = ""
) -> "Figure":
    """``curves``: label -> the histories of its seeds; mean line, min-max band over the rounds all seeds logged.
    Each curve has its own line style and marker, so two curves that coincide both stay visible; ``fixed`` (the
    overrides of every run) goes under the title. Saves ``path`` with each suffix of ``FORMATS`` and returns the
    figure."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import AutoLocator

    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    for index, (label, histories) in enumerate(curves.items()):
        steps = sorted(set.intersection(*(set(s for s, _ in h) for h in histories)))
        per_seed = [{step: value for step, value in h} for h in histories]
        values = [[h[s] for h in per_seed] for s in steps]
        every = max(1, len(steps) // 10)  # about 10 markers a curve, shifted from one curve to the next
        (line,) = ax.plot(
            steps,
            [statistics.fmean(v) for v in values],
            label=label,
            linestyle=LINESTYLES[index % len(LINESTYLES)],
            marker=MARKERS[index % len(MARKERS)],
            markevery=(index % every, every),
        )
        if len(histories) > 1:
            ax.fill_between(
                steps, [min(v) for v in values], [max(v) for v in values], color=line.get_color(), alpha=0.2
            )
    if target is not None:
        ax.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"target {target:g}")
    rounds = AutoLocator()  # matplotlib's default, on whole numbers
    rounds.set_params(integer=True)
    ax.xaxis.set_major_locator(rounds)
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    every_run = textwrap.wrap(f"every run: {fixed}", TITLE_WIDTH) if fixed else []
    ax.set_title("\n".join([f"{metric}: mean over seeds, shaded min–max", *every_run]), fontsize="medium")
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(fontsize="small" if len(curves) < 8 else "x-small")
    fig.tight_layout()
    for suffix in FORMATS:
        fig.savefig(path.with_suffix(f".{suffix}"), dpi=120)
    return fig
