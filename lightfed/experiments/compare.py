"""``lightfed compare``: configs over seeds and hyperparameter sweeps; tables, a plot and the raw results.

Every run is ``lightfed fit [--config BASE ...] --config C <overrides>`` named ``<config stem>__<setting>__seed<S>``
under ``OUT/runs`` (with the folder in front of a stem two configs share); its history is read back from its
``metrics.jsonl``. A local sweep trains --workers runs at a time (default: one per CPU core), each in a process forked
from this one.
Outputs::

    OUT/table.md       one row per (config, setting): final and best (validation) metric over seeds, the test metric at
                       each run's best round, rounds to --target, the final model's distribution over clients (mean,
                       std, worst and best 10 % of the clients), time; mean ± std with the std to 2 significant
                       digits and the mean to its decimal place; no setting column when nothing is swept; the --set
                       and --rounds values of every run under it (and in the plot's title);
                       with --usable F also each config's share of runs whose final metric reaches F x the best run's
                       with --pivot KEY also the final metric with one column per value of the --grid key KEY
    OUT/table.tex      the first table of table.md as a LaTeX booktabs tabular
    OUT/table.csv      its numbers at full precision, mean and std in separate columns named as results.json's rows
    OUT/accuracy.png   metric versus round, mean over seeds, shaded min-max, one line per (config, setting), each
                       with its own line style and marker; the same figure as accuracy.pdf and accuracy.svg
    OUT/results.json   every planned run: config, setting, seed, argv, status, final, best, rounds to target, history,
                       its final record (test metrics) and the test metric at its best round
    OUT/runs/<name>/version_<n>/   the runs' logs, configs and checkpoints (the newest version of a name counts)

Examples::

    lightfed compare --configs configs/quickstart.yaml --seeds 0 1 2 --target 0.9 --workers 3 --out runs/cmp
    lightfed compare --configs configs/quickstart.yaml --grid strategy.init_args.server_lr=1.0,0.5 \\
        --random model.init_args.optimizer.init_args.lr=loguniform:1e-3:1e-1 --samples 4 --rounds 10 --out runs/sweep
    # per-strategy overlays on a dataset's base file
    lightfed compare --base configs/digits/base.yaml --configs configs/digits/fedavg.yaml configs/digits/scaffold.yaml
    # a key prefixed with a config's name applies to that config only: each method its own random search
    lightfed compare --base configs/digits/base.yaml \\
        --configs configs/digits/fedadam.yaml configs/digits/adaptive_fedecado.yaml \\
        --random fedadam:strategy.init_args.server_lr=uniform:0:1 \\
        --random adaptive_fedecado:strategy.init_args.tolerance=loguniform:1e-4:1 --samples 10 --usable 0.8
    # a robustness table: aggregators x attacks, one column per fraction of malicious clients
    lightfed compare --base configs/robust/base.yaml --configs configs/robust/fedavg.yaml configs/robust/krum.yaml \\
        --grid trainer.attack=lightfed.attacks.SignFlipping,lightfed.attacks.LittleIsEnough \\
        --grid trainer.attack.init_args.fraction=0,0.1,0.2,0.3 --pivot trainer.attack.init_args.fraction
    # a SLURM array: one run per task, then one job that gathers the table and the plot
    lightfed compare ARGS --list | wc -l                       # how many tasks
    lightfed compare ARGS --task-index $SLURM_ARRAY_TASK_ID
    lightfed compare ARGS --collect
"""

import argparse
import shlex
import sys
from pathlib import Path

from lightfed.distributions import usage
from lightfed.experiments.collect import collect
from lightfed.experiments.execution import execute, execute_all
from lightfed.experiments.markdown import fixed_label
from lightfed.experiments.plan import Run, plan_runs, resolve_rounds
from lightfed.experiments.sweep_specs import RANDOM_KINDS, SpecError, parse_grid, parse_random, parse_set, plan_settings
from lightfed.run.cores import available_cores


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lightfed compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", nargs="+", required=True, metavar="YAML", help="lightfed config files")
    parser.add_argument(
        "--base", nargs="+", default=[], metavar="YAML", help="config files every run reads before its --configs file"
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="values of seed_everything (default: 0)")
    parser.add_argument("--rounds", type=int, help="override trainer.rounds of every run")
    parser.add_argument("--target", type=float, help="report the rounds each run needs to reach this metric value")
    parser.add_argument("--metric", default="val_acc", help="logged scalar to compare (default: val_acc)")
    parser.add_argument("--mode", choices=["max", "min"], help="whether higher is better (default: min for *loss*)")
    parser.add_argument("--out", default="runs/compare", help="output folder; the runs' logs go to OUT/runs")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="fixed override of every run")
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="sweep all values (product)")
    parser.add_argument(
        "--random", action="append", default=[], metavar="KEY=DIST", help=f"sample from {usage(RANDOM_KINDS)}"
    )
    parser.add_argument(
        "--pivot", metavar="KEY", help="also tabulate the final metric with one column per value of this --grid key"
    )
    parser.add_argument("--samples", type=int, help="how many --random settings to draw")
    parser.add_argument("--sweep-seed", type=int, default=0, help="seed of the --random draws (default: 0)")
    parser.add_argument(
        "--workers",
        type=int,
        default=available_cores(),
        help="runs of a local sweep "
        "trained at a time, each in a forked process (default: the CPU cores available, %(default)s)",
    )
    parser.add_argument(
        "--usable",
        type=float,
        metavar="F",
        help="also tabulate each config's share of runs whose final "
        "metric is at least F times the best run's (e.g. 0.8)",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="print each planned run's lightfed command and exit")
    action.add_argument(
        "--task-index", type=int, metavar="I", help="run only run I of --list (e.g. a SLURM array task)"
    )
    action.add_argument("--collect", action="store_true", help="summarise the finished runs in OUT without running")
    return parser


def fixed_overrides(args: argparse.Namespace) -> dict[str, str]:
    """The ``--set`` overrides, by key."""
    fixed = {}
    for key, value in map(parse_set, args.set):
        if key in fixed:
            raise SpecError(f"{key} is given twice in --set")
        fixed[key] = value
    return fixed


def plan_from_args(args: argparse.Namespace) -> list[Run]:
    missing = [c for c in [*args.base, *args.configs] if not Path(c).is_file()]
    if missing:
        raise SpecError(f"config file not found: {missing[0]}")
    fixed = fixed_overrides(args)
    grid, randoms = [parse_grid(s) for s in args.grid], [parse_random(s) for s in args.random]
    if args.pivot is not None and args.pivot not in [key for key, _ in grid]:
        raise SpecError(f"--pivot {args.pivot}: not a --grid key ({', '.join(key for key, _ in grid) or 'no --grid'})")
    if randoms and not args.samples:
        raise SpecError("--random needs --samples K (how many settings to draw)")
    if args.samples is not None and (not randoms or args.samples < 1):
        raise SpecError("--samples needs --random and must be at least 1")
    if args.rounds is not None and args.rounds < 1:
        raise SpecError("--rounds must be at least 1")
    settings = plan_settings(grid, randoms, args.samples or 1, args.sweep_seed)
    configs, base = ([str(Path(c).resolve()) for c in files] for files in (args.configs, args.base))
    return plan_runs(configs, args.seeds, settings, fixed, args.rounds, str(Path(args.out).resolve() / "runs"), base)


def _run_task(runs: list[Run], index: int, metric: str, runs_dir: Path) -> int:
    """Trains run ``index`` of the plan ``runs`` alone (an array task); its exit status."""
    if not 0 <= index < len(runs):
        raise SpecError(f"--task-index {index} is out of range: the plan has {len(runs)} runs (0..{len(runs) - 1})")
    resolve_rounds([runs[index]])
    ok, _ = execute(runs[index], index, len(runs), metric, runs_dir)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    mode = args.mode or ("min" if "loss" in args.metric else "max")
    if args.usable is not None and (mode == "min" or not 0 < args.usable <= 1):
        parser.error("--usable F needs 0 < F <= 1 and a metric where higher is better")
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    out = Path(args.out).resolve()
    try:
        runs = plan_from_args(args)
        if args.task_index is not None:
            return _run_task(runs, args.task_index, args.metric, out / "runs")
        rounds = resolve_rounds(runs)
        if args.list:
            for run in runs:
                print("lightfed " + shlex.join(run.argv))
            return 0
        ok = True
        if not args.collect:
            settings = len({run.group for run in runs})
            print(
                f"compare: {len(runs)} runs ((config, setting) pairs × seeds = {settings} × "
                f"{len(args.seeds)}), logs in {out / 'runs'}",
                flush=True,
            )
            ok = execute_all(runs, args.metric, out / "runs", args.workers)
        fixed = fixed_label(fixed_overrides(args), args.rounds)
        unfinished = collect(runs, rounds, out, args.metric, args.target, mode, args.usable, args.pivot, fixed)
    except SpecError as error:
        parser.error(str(error))
    except KeyboardInterrupt:  # each run in flight stops after its round, with its checkpoint
        print(
            f"compare: stopped by Ctrl-C; rerun the command to finish the runs (--set ckpt_path=auto resumes them), "
            f"or build the table of the finished ones with --collect (logs in {out / 'runs'})",
            file=sys.stderr,
            flush=True,
        )
        return 130
    if unfinished:
        print(
            f"compare: {len(unfinished)} of {len(runs)} runs have no finished logs in {out / 'runs'}: "
            + ", ".join(run.name for run in unfinished),
            file=sys.stderr,
            flush=True,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
