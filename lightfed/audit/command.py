"""``lightfed audit``: a config's federation without DP and under UserLevelDP at several noise multipliers, each run
with canary clients (the one-shot estimate of epsilon) and attacked by membership inference (loss threshold and
offline LiRA with shadow runs); a table and a plot.

Outputs::

    OUT/table.md     one row per setting: the accountant's epsilon, the canary estimate and its confidence bound,
                     val_acc, and each attack's advantage, TPR at --fpr and epsilon lower bound
    OUT/table.csv    the same numbers at full precision, with each attack's AUC
    OUT/audit.png    epsilons and advantages against the noise multiplier (also audit.pdf, audit.svg)
    OUT/runs/        the runs' logs: <setting>-target and <setting>-shadow<i>

Example::

    lightfed audit -c configs/privacy/audit-digits.yaml --noise 0 1 2 4 --out runs/audit
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from lightfed.audit.audit_row import Fit, RowResult, audit_row
from lightfed.audit.plan import AuditSettings, Setting, check_configs
from lightfed.audit.report import markdown_table, plot_audit, write_csv
from lightfed.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lightfed audit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add(
        "-c",
        "--config",
        nargs="+",
        required=True,
        metavar="YAML",
        help="config files of the federation (no transforms)",
    )
    add("--noise", nargs="+", type=float, default=[0.0, 1.0, 2.0, 4.0], help="UserLevelDP noise multipliers")
    add("--no-baseline", action="store_true", help="leave out the run without DP")
    add("--clip", type=float, default=0.5, help="UserLevelDP's clip norm, and the canaries' norm (default 0.5)")
    add("--canaries", type=int, default=100, help="canary clients inserted (default 100)")
    add("--unobserved", type=int, default=100, help="fresh directions of the null (default 100)")
    add("--null", choices=["fitted", "theory"], default="fitted", help="the null Gaussian (see Canaries)")
    add("--shadows", type=int, default=4, help="LiRA's shadow runs per setting, even (default 4)")
    add("--holdout", type=float, default=0.5, help="share of each client's examples held out (default 0.5)")
    add("--unseen-clients", type=int, default=20, help="clients that never train: user-level non-members")
    add("--rounds", type=int, help="override trainer.rounds")
    add("--seed", type=int, default=0, help="seed_everything of every run (default 0)")
    add("--delta", type=float, default=1e-5, help="delta of every epsilon (default 1e-5)")
    add("--fpr", type=float, default=0.1, help="the false-positive rate of the TPR column (default 0.1)")
    add("--confidence", type=float, default=0.95, help="level of the estimate's and the bounds' confidence")
    add("--out", default="runs/audit", help="output folder")
    return parser


def check_args(args: argparse.Namespace) -> None:
    """Raises ``ConfigError`` for a setting no audit can run with."""
    checks = {
        "--noise values must be >= 0": all(z >= 0 for z in args.noise),
        "--shadows must be even and >= 2 (pairs of complementary halves)": args.shadows >= 2 and args.shadows % 2 == 0,
        "--holdout must be in (0, 1)": 0 < args.holdout < 1,
        "--unseen-clients must be >= 1 (the user-level non-members)": args.unseen_clients >= 1,
        "--clip must be > 0": args.clip > 0,
        "--canaries and --unobserved must be >= 2": args.canaries >= 2 and args.unobserved >= 2,
        "--rounds must be >= 1": args.rounds is None or args.rounds >= 1,
        "--delta, --fpr and --confidence must be in (0, 1)": all(
            0 < v < 1 for v in (args.delta, args.fpr, args.confidence)
        ),
    }
    for message, holds in checks.items():
        if not holds:
            raise ConfigError(f"audit: {message}")
    check_configs(tuple(args.config))


def settings_of(args: argparse.Namespace) -> AuditSettings:
    return AuditSettings(
        tuple(str(Path(c).resolve()) for c in args.config),
        Path(args.out).resolve(),
        args.seed,
        args.rounds,
        args.clip,
        args.canaries,
        args.unobserved,
        args.null,
        args.delta,
        args.holdout,
        args.unseen_clients,
        args.shadows,
    )


def settings_to_run(args: argparse.Namespace) -> list[Setting]:
    """The audit's rows: without DP (unless ``--no-baseline``), then each ``--noise``."""
    return ([] if args.no_baseline else [Setting(None)]) + [Setting(z) for z in args.noise]


def main(argv: list[str], fit: Fit | None = None) -> list[RowResult]:
    """Runs the audit ``argv``; returns its rows. ``fit``: how a run is trained (default: in this process)."""
    args = build_parser().parse_args(argv)
    check_args(args)
    if fit is None:
        from lightfed.subcommands import fit_in_process

        fit = fit_in_process  # type: ignore[assignment]
    settings = settings_of(args)
    rows_to_run = settings_to_run(args)
    runs, began = len(rows_to_run) * (1 + args.shadows), time.perf_counter()
    print(
        f"audit: {len(rows_to_run)} settings x (1 target + {args.shadows} shadows) = {runs} runs, logs in "
        f"{settings.out / 'runs'}",
        flush=True,
    )
    say = lambda line: print(f"audit: {line}; {time.perf_counter() - began:.0f} s in all", flush=True)  # noqa: E731
    rows = [audit_row(settings, setting, fit, say, args.fpr, args.confidence) for setting in rows_to_run]
    settings.out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(rows, args.fpr, args.confidence)
    (settings.out / "table.md").write_text(table)
    write_csv(rows, settings.out / "table.csv")
    plot_audit(rows, settings.out / "audit.png")
    print(table + f"audit: table, CSV and plot in {settings.out}", flush=True)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
