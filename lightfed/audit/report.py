"""An audit's table (markdown and CSV) and plot: per privacy setting, the accountant's epsilon, the canary estimate,
the attacks' advantage, TPR at the FPR and epsilon lower bounds."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

from lightfed.audit.audit_row import RowResult

ATTACKS = ("loss/example", "loss/user", "lira/example", "lira/user")
FORMATS = ("png", "pdf", "svg")


def _number(value: float) -> str:
    return "∞" if value == math.inf else "—" if math.isnan(value) else f"{value:.3g}"


def markdown_table(rows: Sequence[RowResult], fpr: float, confidence: float) -> str:
    """The table: one row per setting; each attack's advantage, TPR at ``fpr`` and epsilon lower bound."""
    head = ["privacy", "ε accountant", "ε canary estimate", f"ε estimate {confidence:.0%} bound", "val_acc"]
    head += [f"{a} {what}" for a in ATTACKS for what in ("adv", f"TPR@{fpr:g}", "ε ≥")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row.label, _number(row.accountant_epsilon), _number(row.estimate), _number(row.estimate_upper)]
        cells.append(_number(row.val_acc))
        for name in ATTACKS:
            attack = row.attacks[name]
            cells += [f"{attack.advantage:.3f}", f"{attack.tpr_at_fpr:.3f}", f"{attack.epsilon_lower:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_csv(rows: Sequence[RowResult], path: Path) -> None:
    """Every number at full precision, one row per setting."""
    fields = ["privacy", "noise_multiplier", "accountant_epsilon", "estimate", "estimate_upper", "val_acc"]
    fields += [f"{a}/{k}" for a in ATTACKS for k in ("auc", "advantage", "tpr_at_fpr", "epsilon_lower")]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(fields)
        for row in rows:
            values: list[object] = [row.label, "" if row.noise is None else row.noise, row.accountant_epsilon]
            values += [row.estimate, row.estimate_upper, row.val_acc]
            for name in ATTACKS:
                a = row.attacks[name]
                values += [a.auc, a.advantage, a.tpr_at_fpr, a.epsilon_lower]
            writer.writerow(values)


def plot_audit(rows: Sequence[RowResult], path: Path) -> None:
    """Epsilons (accountant, estimate with its bound, the attacks' best lower bound) and the attacks' advantage
    against the noise multiplier, the run without DP as a dashed line; saved with each suffix of ``FORMATS``."""
    from matplotlib.figure import Figure

    private = [row for row in rows if row.noise is not None]
    noise = [row.noise for row in private]
    fig = Figure(figsize=(11, 4.5))
    left, right = fig.subplots(1, 2)
    finite = lambda v: v if math.isfinite(v) else math.nan  # noqa: E731
    left.plot(noise, [finite(r.accountant_epsilon) for r in private], "o-", label="accountant (upper bound)")
    left.plot(noise, [finite(r.estimate) for r in private], "s--", label="canary estimate")
    left.plot(noise, [finite(r.estimate_upper) for r in private], "^:", label="estimate's confidence bound")
    best = [max(r.attacks[a].epsilon_lower for a in ATTACKS) for r in private]
    left.plot(noise, best, "D-.", label="attacks' lower bound (best)")
    left.set_yscale("symlog", linthresh=1.0)
    left.set_xlabel("noise multiplier z")
    left.set_ylabel("epsilon")
    for index, name in enumerate(ATTACKS):
        (line,) = right.plot(
            noise, [r.attacks[name].advantage for r in private], ("o-", "s--", "^:", "D-.")[index], label=name
        )
        for row in rows:
            if row.noise is None:
                right.axhline(row.attacks[name].advantage, color=line.get_color(), linestyle=":", linewidth=1)
    right.set_xlabel("noise multiplier z (dotted: without DP)")
    right.set_ylabel("membership advantage (TPR - FPR)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    for suffix in FORMATS:
        fig.savefig(path.with_suffix(f".{suffix}"), dpi=120)
