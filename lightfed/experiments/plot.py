"""The plot of a comparison: the metric against the round, one line per (config, setting)."""

import statistics
from pathlib import Path


def plot_curves(curves: dict[str, list[list[list[float]]]], metric: str, target: float | None, path: Path) -> None:
    """``curves``: label -> the histories of its seeds; mean line, min-max band over the rounds all seeds logged."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import AutoLocator

    fig, ax = plt.subplots(figsize=(8, 5))
    for label, histories in curves.items():
        steps = sorted(set.intersection(*(set(s for s, _ in h) for h in histories)))
        per_seed = [{step: value for step, value in h} for h in histories]
        values = [[h[s] for h in per_seed] for s in steps]
        marker = "." if len(steps) < 30 else None
        (line,) = ax.plot(steps, [statistics.fmean(v) for v in values], label=label, marker=marker)
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
    ax.set_title(f"{metric}: mean over seeds, shaded min–max")
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(fontsize="small" if len(curves) < 8 else "x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
