"""``lightfed compare``: configs over seeds and hyperparameter sweeps; a Markdown table, a plot and the raw results.

Every run is ``lightfed fit --config C <overrides>`` named ``<config stem>__<setting>__seed<S>`` under ``OUT/runs``
(with the folder in front of a stem two configs share); its history is read back from its ``metrics.jsonl``. A local
sweep trains --workers runs at a time (default: one per CPU core), each in a process forked from this one.
Outputs::

    OUT/table.md       one row per (config, setting): final and best (validation) metric over seeds, the test metric at
                       each run's best round, rounds to --target, time;
                       with --usable F also each config's share of runs whose final metric reaches F x the best run's
    OUT/accuracy.png   metric versus round, mean over seeds, shaded min-max, one line per (config, setting)
    OUT/results.json   every planned run: config, setting, seed, argv, status, final, best, rounds to target, history,
                       its final record (test metrics) and the test metric at its best round
    OUT/runs/<name>/version_<n>/   the runs' logs, configs and checkpoints (the newest version of a name counts)

Examples::

    lightfed compare --configs configs/quickstart.yaml --seeds 0 1 2 --target 0.9 --workers 3 --out runs/cmp
    lightfed compare --configs configs/quickstart.yaml --grid strategy.init_args.server_lr=1.0,0.5 \\
        --random model.init_args.lr=loguniform:1e-3:1e-1 --samples 4 --sweep-seed 0 --rounds 10 --out runs/sweep
    # a key prefixed with a config's name applies to that config only: each method its own random search
    lightfed compare --configs configs/digits/fedadam.yaml configs/digits/adaptive_fedecado.yaml \\
        --random fedadam:strategy.init_args.server_lr=uniform:0:1 \\
        --random adaptive_fedecado:strategy.init_args.tolerance=loguniform:1e-4:1 --samples 10 --usable 0.8
    # a SLURM array: one run per task, then one job that gathers the table and the plot
    lightfed compare ARGS --list | wc -l                       # how many tasks
    lightfed compare ARGS --task-index $SLURM_ARRAY_TASK_ID
    lightfed compare ARGS --collect
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import multiprocessing
import random
import re
import shlex
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from lightfed.callbacks.metrics_file import METRICS_FILE
from lightfed.core.cores import available_cores
from lightfed.distributions import Distribution, usage
from lightfed.errors import ConfigError, DivergenceError, LightfedError

KEY = re.compile(r"([\w.-]+:)?[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*")  # an optional "config-name:" scope
MANAGED = {"trainer.root_dir": "--out", "trainer.name": "the run name", "seed_everything": "--seeds"}
RANDOM_KINDS = ("loguniform", "uniform", "randint", "choice")  # the distributions --random takes
Setting = dict[str, str]  # override key -> value, as passed to the lightfed command line


class SpecError(ValueError):
    """A malformed --set/--grid/--random spec or plan; the message is one line for parser.error."""


# ----------------------------------------------------------------- specs


def _split(spec: str, option: str) -> tuple[str, str]:
    key, sep, value = spec.partition("=")
    key = key.strip().removeprefix("--")
    if not sep or not KEY.fullmatch(key) or not value.strip():
        raise SpecError(f"{option} {spec!r}: expected KEY=VALUE with a dotted key, e.g. model.init_args.lr=0.01")
    bare = key.rpartition(":")[2]  # without a config-name scope
    if bare in MANAGED:
        raise SpecError(f"{option} {spec!r}: {bare} is set by lightfed compare (use {MANAGED[bare]})")
    return key, value.strip()


def parse_set(spec: str) -> tuple[str, str]:
    """``key=value`` -> (key, value)."""
    return _split(spec, "--set")


def parse_grid(spec: str) -> tuple[str, list[str]]:
    """``key=v1,v2,v3`` -> (key, [v1, v2, v3])."""
    key, values = _split(spec, "--grid")
    items = [v.strip() for v in values.split(",")]
    if not all(items):
        raise SpecError(f"--grid {spec!r}: empty value in the comma-separated list")
    if len(set(items)) != len(items):
        raise SpecError(f"--grid {spec!r}: a value is listed twice")
    return key, items


def parse_random(spec: str) -> tuple[str, Distribution]:
    """``key=loguniform:1e-4:1e-1`` / ``uniform:a:b`` / ``randint:a:b`` / ``choice:a,b,c`` -> (key, distribution)."""
    key, value = _split(spec, "--random")
    try:
        return key, Distribution.parse(value, f"--random {key}", RANDOM_KINDS)
    except ConfigError as error:
        raise SpecError(str(error)) from None


def expand_grid(grid: list[tuple[str, list[str]]]) -> list[Setting]:
    """Cartesian product of the grid's values, first key varying slowest; [{}] without a grid."""
    keys = [key for key, _ in grid]
    return [dict(zip(keys, values)) for values in itertools.product(*(values for _, values in grid))]


def sample_random(specs: list[tuple[str, Distribution]], samples: int, sweep_seed: int) -> list[Setting]:
    """``samples`` settings drawn from ``specs``, the same for the same sweep seed; [{}] without specs."""
    if not specs:
        return [{}]
    rng = random.Random(sweep_seed)
    return [{key: distribution.sample_argument(rng) for key, distribution in specs} for _ in range(samples)]


def plan_settings(grid, randoms, samples: int = 1, sweep_seed: int = 0) -> list[Setting]:
    """Every grid point combined with every random sample; duplicates (e.g. repeated choices) are dropped."""
    keys = [key for key, _ in grid] + [key for key, _ in randoms]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise SpecError(f"{repeated[0]} is swept twice (--grid/--random); give each key once")
    settings = [{**point, **sample} for point in expand_grid(grid) for sample in sample_random(randoms, samples, sweep_seed)]
    unique = {tuple(setting.items()): setting for setting in settings}
    return list(unique.values())


# ----------------------------------------------------------------- plan


def short_key(key: str) -> str:
    return key.replace(".init_args.", ".")


def setting_label(setting: Setting) -> str:
    """``strategy.server_lr=0.5 model.lr=0.01``, or ``defaults`` for the config as it is."""
    return " ".join(f"{short_key(k)}={v}" for k, v in setting.items()) or "defaults"


def run_name(stem: str, setting: Setting, seed: int) -> str:
    """Deterministic folder name of one run: config stem, setting and seed (long settings are hashed)."""
    label = "__".join(f"{short_key(k)}={v}" for k, v in setting.items())
    label = re.sub(r"[^\w.=+-]", "_", label)
    if len(label) > 100:
        label = f"{label[:80]}-{hashlib.sha1(label.encode()).hexdigest()[:10]}"
    return "__".join(part for part in (stem, label, f"seed{seed}") if part)


@dataclass
class Run:
    config: str  # absolute path of the config file
    stem: str
    setting: Setting
    seed: int
    name: str
    argv: list[str]  # lightfed's arguments, "fit" first

    @property
    def group(self) -> tuple[str, str]:
        return self.stem, setting_label(self.setting)


def run_argv(config: str, fixed: Setting, setting: Setting, seed: int, rounds: int | None, runs_dir: str, name: str) -> list[str]:
    argv = ["fit", "--config", config, "--trainer.progress_bar", "false"]
    for key, value in [*fixed.items(), *setting.items()]:
        argv += [f"--{key}", value]
    if rounds is not None:
        argv += ["--trainer.rounds", str(rounds)]
    return argv + ["--seed_everything", str(seed), "--trainer.root_dir", runs_dir, "--trainer.name", name]


def config_names(configs: list[str]) -> list[str]:
    """File stems, with the folder in front where two stems are equal (digits/fedavg.yaml -> digits-fedavg)."""
    stems = [Path(c).stem for c in configs]
    names = [f"{Path(c).parent.name}-{stem}" if stems.count(stem) > 1 else stem for c, stem in zip(configs, stems)]
    for name in names:
        if names.count(name) > 1:
            raise SpecError(f"two configs are named {name!r}; run names come from the folder and file name, so rename one")
    return names


def scoped(setting: Setting, name: str, names: list[str]) -> Setting:
    """The keys of ``setting`` that apply to the config called ``name``: unscoped keys and keys ``name:KEY``
    (returned without the scope)."""
    result: Setting = {}
    for key, value in setting.items():
        scope, _, bare = key.rpartition(":")
        if scope and scope not in names:
            raise SpecError(f"{key}: {scope!r} is not the name of a config ({', '.join(names)})")
        if scope in ("", name):
            if bare in result:
                raise SpecError(f"{bare} is given both for every config and for {name}; give it once")
            result[bare] = value
    return result


def plan_runs(configs: list[str], seeds: list[int], settings: list[Setting], fixed: Setting, rounds: int | None, runs_dir: str) -> list[Run]:
    """Configs x settings x seeds, seeds varying fastest; each config gets the keys scoped to it (``scoped``)."""
    if len(set(seeds)) != len(seeds):
        raise SpecError("a seed is given twice in --seeds")
    stems = config_names(configs)
    runs = []
    for config, stem in zip(configs, stems):
        mine = scoped(fixed, stem, stems)
        own_settings = list({tuple(s.items()): s for s in (scoped(s, stem, stems) for s in settings)}.values())
        clash = sorted(set(mine) & {key for setting in own_settings for key in setting})
        if clash:
            raise SpecError(f"{clash[0]} is both fixed (--set) and swept (--grid/--random); give it once")
        if rounds is not None and ("trainer.rounds" in mine or any("trainer.rounds" in s for s in own_settings)):
            raise SpecError("trainer.rounds is given both by --rounds and by --set/--grid/--random; give it once")
        for setting in own_settings:
            for seed in seeds:
                name = run_name(stem, setting, seed)
                runs.append(Run(config, stem, setting, seed, name, run_argv(config, mine, setting, seed, rounds, runs_dir, name)))
    names = [run.name for run in runs]
    if len(set(names)) != len(names):
        raise SpecError("two settings give the same run name; use values that differ in letters or digits")
    return runs


def resolve_rounds(runs: list[Run]) -> dict[tuple[str, str], int]:
    """Validates each (config, setting)'s arguments with lightfed's own parser (nothing is trained) and returns
    its trainer.rounds, the last round a finished run has logged."""
    from lightfed.cli import build_parser

    parser, subparsers = build_parser()
    for p in [parser, *subparsers.values()]:
        p.exit_on_error = False
    rounds = {}
    for run in runs:
        if run.group not in rounds:
            try:
                rounds[run.group] = parser.parse_args(run.argv)["fit"].trainer.rounds
            except Exception as error:  # jsonargparse's ArgumentError, or a config file it cannot read
                raise SpecError(f"run {run.name}: {' '.join(str(error).split())}") from None
    return rounds


# ----------------------------------------------------------------- logs and numbers


def metric_on_test_set(metric: str) -> str | None:
    """The test-set counterpart of a validation metric (``val_acc`` -> ``test_acc``); None for another metric."""
    return "test_" + metric.removeprefix("val_") if metric.startswith("val_") else None


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def line_problem(values: object, metric: str) -> str | None:
    """Why a metrics-file line cannot be used (None when it can): what it must hold to count."""
    if not isinstance(values, dict):
        return "not a JSON object"
    if "round" not in values:
        return "no round"
    if not isinstance(values["round"], int) or isinstance(values["round"], bool):
        return f"round {values['round']!r} is not a whole number"
    test = metric_on_test_set(metric)
    for key in (metric, "round/time_s", *([f"best_{test}"] if test else [])):
        if key in values and not _finite(values[key]):
            return f"{key} {values[key]!r} is not a finite number"
    return None


def metrics_lines(path: Path, metric: str) -> list[dict]:
    """The lines of a metrics file that can be used; each other line is skipped with one warning on stderr that
    names the file, the line and what is wrong with it (a line cut short by a kill, bytes that are not UTF-8, ...)."""
    lines = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            values = json.loads(raw.decode("utf-8"))
            problem = line_problem(values, metric)
        except UnicodeDecodeError:
            problem = "not UTF-8"
        except ValueError:  # json.JSONDecodeError, or a number too large for Python
            problem = "not JSON"
        if problem is None:
            lines.append(values)
        else:
            print(f"compare: warning: skipped line {number} of {path}: {problem}", file=sys.stderr, flush=True)
    return lines


def read_log(runs_dir: Path, name: str, metric: str) -> dict | None:
    """History of ``metric``, summed ``round/time_s``, the names of the logged metrics and the final record (the run's
    test metrics, ``{"final": true, ...}``), from the metrics file of the newest version of a run; None if it has
    none. A round logged again (a resumed run) counts with its last line, and the newest final record counts; lines
    that cannot be used are skipped (``metrics_lines``)."""
    versions = [p for p in (runs_dir / name).glob("version_*") if p.name[8:].isdigit() and (p / METRICS_FILE).is_file()]
    if not versions:
        return None
    log_dir = max(versions, key=lambda p: int(p.name[8:]))
    rounds, final = {}, None
    for values in metrics_lines(log_dir / METRICS_FILE, metric):
        if values.get("final") is True:
            final = values
        else:
            rounds[values.pop("round")] = values
    history = [[done, values[metric]] for done, values in sorted(rounds.items()) if metric in values]
    return {"log_dir": str(log_dir), "metrics": sorted({key for values in rounds.values() for key in values}),
            "history": history, "wall_time_s": sum(values.get("round/time_s", 0.0) for values in rounds.values()),
            "final_record": final, "last_round": max(rounds, default=0)}


def best_round_test_value(log: dict, metric: str) -> float | None:
    """The test metric of the round with the best ``metric``, from the run's final record; None when the record is
    missing, older than the run's last round, or chose its best round on another metric."""
    final, test = log["final_record"], metric_on_test_set(metric)
    if final is None or test is None or final["round"] != log["last_round"] or final.get("monitor") != metric:
        return None
    return final.get(f"best_{test}")


def reached(value: float, target: float, mode: str) -> bool:
    return value >= target if mode == "max" else value <= target


def summarise_history(history: list[list[float]], target: float | None, mode: str = "max") -> dict:
    """Final and best value and the first round that reaches ``target`` (None if never) of one run."""
    values = [v for _, v in history]
    first = next((step for step, v in history if reached(v, target, mode)), None) if target is not None else None
    return {"final": values[-1], "best": max(values) if mode == "max" else min(values), "rounds_to_target": first}


def summarise_group(results: list[dict], planned: int) -> dict:
    """One table row's numbers from the finished runs of one (config, setting)."""
    def mean_std(key, runs=results):
        values = [r[key] for r in runs]
        if not values:
            return None, None
        return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0

    hits = [r["rounds_to_target"] for r in results if r["rounds_to_target"] is not None]
    final_mean, final_std = mean_std("final")
    best_mean, best_std = mean_std("best")
    tested = [r for r in results if r.get("test_at_best") is not None]
    test_mean, test_std = mean_std("test_at_best", tested)
    return {"finished": len(results), "planned": planned, "final_mean": final_mean, "final_std": final_std,
            "best_mean": best_mean, "best_std": best_std, "tested": len(tested), "test_at_best_mean": test_mean,
            "test_at_best_std": test_std, "reached": len(hits),
            "rounds_to_target_mean": statistics.fmean(hits) if hits else None,
            "wall_time_s_mean": mean_std("wall_time_s")[0]}


def format_rounds(row: dict) -> str:
    if not row["reached"]:
        return "—"
    return f"{round(row['rounds_to_target_mean'], 1):g} ({row['reached']}/{row['finished']})"


def render_table(rows: list[dict], metric: str, target: float | None, mode: str = "max") -> str:
    """Markdown table, one row per (config, setting); each row holds ``config``, ``setting`` and summarise_group's keys."""
    def cell(text) -> str:
        return str(text).replace("|", "\\|")

    def mean_std(mean, std, n):
        return "—" if mean is None else f"{mean:.4f}" + (f" ± {std:.4f}" if n > 1 else "")

    test = metric_on_test_set(metric)
    header = ["config", "setting", "runs", f"final {metric}", f"best {metric}"]
    if test is not None:
        header.append(f"{test} at best {metric}")
    if target is not None:
        header.append(f"rounds to {metric} {'≥' if mode == 'max' else '≤'} {target:g}")
    header.append("time/run (s)")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["config"], row["setting"], f"{row['finished']}/{row['planned']}",
                 mean_std(row["final_mean"], row["final_std"], row["finished"]),
                 mean_std(row["best_mean"], row["best_std"], row["finished"])]
        if test is not None:
            tested = mean_std(row["test_at_best_mean"], row["test_at_best_std"], row["tested"])
            cells.append(tested + (f" ({row['tested']}/{row['finished']})" if 0 < row["tested"] < row["finished"] else ""))
        if target is not None:
            cells.append(format_rounds(row))
        cells.append("—" if row["wall_time_s_mean"] is None else f"{row['wall_time_s_mean']:.1f}")
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    note = ("\nruns: finished/planned. final, best: mean ± std over the finished runs (best: each run's best evaluated "
            "round)." + (f" {test} at best {metric}: the test set, read once at the end of each run, at the round with "
                         f"the best {metric} (if not every run has it: with/finished)." if test is not None else "")
            + (" rounds to target: mean over the runs that reach it (reached/finished)." if target is not None else "")
            + " time/run: the sum of round/time_s (training and evaluation, without start-up).\n")
    return "\n".join(lines) + "\n" + note


def usable_rates(results: list[dict], fraction: float) -> tuple[float | None, dict[str, dict]]:
    """The best final value over the finished runs of every config, and per config how many of its finished runs
    end at or above ``fraction`` x that best value ("usable", as in the Adaptive FedECADO paper's Table 1); diverged
    runs count as ended and not usable."""
    finished = [r for r in results if r["status"] == "finished"]
    best = max((r["final"] for r in finished), default=None)
    rates = {}
    for stem in dict.fromkeys(r["stem"] for r in results):
        mine = [r for r in finished if r["stem"] == stem]
        diverged = sum(r["status"] == "diverged" and r["stem"] == stem for r in results)
        usable = sum(r["final"] >= fraction * best for r in mine)
        ended = len(mine) + diverged
        rates[stem] = {"usable": usable, "finished": len(mine), "diverged": diverged,
                       "share": usable / ended if ended else None}
    return best, rates


def render_usable(best: float | None, rates: dict[str, dict], metric: str, fraction: float) -> str:
    """Markdown table of ``usable_rates``."""
    lines = ["| config | usable runs | diverged | usable share |", "|---|---|---|---|"]
    for stem, rate in rates.items():
        share = "—" if rate["share"] is None else f"{100 * rate['share']:.0f}%"
        ended = rate["finished"] + rate["diverged"]
        lines.append(f"| {stem} | {rate['usable']}/{ended} | {rate['diverged']} | {share} |")
    reference = "—" if best is None else f"{best:.4f}"
    return ("\n".join(lines) + f"\n\nusable: final {metric} >= {fraction:g} x the best final {metric} of all finished "
            f"runs ({reference}); a run whose weights became NaN/Inf counts as diverged, not usable.\n")


def plot_curves(curves: dict[str, list[list[list[float]]]], metric: str, target: float | None, path: Path) -> None:
    """``curves``: label -> the histories of its seeds; mean line, min-max band over the rounds all seeds logged."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for label, histories in curves.items():
        steps = sorted(set.intersection(*(set(s for s, _ in h) for h in histories)))
        per_seed = [dict(map(tuple, h)) for h in histories]
        values = [[h[s] for h in per_seed] for s in steps]
        line, = ax.plot(steps, [statistics.fmean(v) for v in values], label=label, marker="." if len(steps) < 30 else None)
        if len(histories) > 1:
            ax.fill_between(steps, [min(v) for v in values], [max(v) for v in values], color=line.get_color(), alpha=0.2)
    if target is not None:
        ax.axhline(target, color="gray", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric}: mean over seeds, shaded min–max")
    ax.grid(alpha=0.3)
    if curves:
        ax.legend(fontsize="small" if len(curves) < 8 else "x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lightfed compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", required=True, metavar="YAML", help="lightfed config files")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="values of seed_everything (default: 0)")
    parser.add_argument("--rounds", type=int, help="override trainer.rounds of every run")
    parser.add_argument("--target", type=float, help="report the rounds each run needs to reach this metric value")
    parser.add_argument("--metric", default="val_acc", help="logged scalar to compare (default: val_acc)")
    parser.add_argument("--mode", choices=["max", "min"], help="whether higher is better (default: min for *loss*)")
    parser.add_argument("--out", default="runs/compare", help="output folder; the runs' logs go to OUT/runs")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="fixed override of every run")
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="sweep all values (product)")
    parser.add_argument("--random", action="append", default=[], metavar="KEY=DIST", help=f"sample from {usage(RANDOM_KINDS)}")
    parser.add_argument("--samples", type=int, help="how many --random settings to draw")
    parser.add_argument("--sweep-seed", type=int, default=0, help="seed of the --random draws (default: 0)")
    parser.add_argument("--workers", type=int, default=available_cores(), help="runs of a local sweep "
                        "trained at a time, each in a forked process (default: the CPU cores available, %(default)s)")
    parser.add_argument("--usable", type=float, metavar="F", help="also tabulate each config's share of runs whose final "
                        "metric is at least F times the best run's (e.g. 0.8)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="print each planned run's lightfed command and exit")
    action.add_argument("--task-index", type=int, metavar="I", help="run only run I of --list (e.g. a SLURM array task)")
    action.add_argument("--collect", action="store_true", help="summarise the finished runs in OUT without running")
    return parser


def plan_from_args(args: argparse.Namespace) -> list[Run]:
    missing = [c for c in args.configs if not Path(c).is_file()]
    if missing:
        raise SpecError(f"config file not found: {missing[0]}")
    fixed = {}
    for key, value in map(parse_set, args.set):
        if key in fixed:
            raise SpecError(f"{key} is given twice in --set")
        fixed[key] = value
    grid, randoms = [parse_grid(s) for s in args.grid], [parse_random(s) for s in args.random]
    if randoms and not args.samples:
        raise SpecError("--random needs --samples K (how many settings to draw)")
    if args.samples is not None and (not randoms or args.samples < 1):
        raise SpecError("--samples needs --random and must be at least 1")
    if args.rounds is not None and args.rounds < 1:
        raise SpecError("--rounds must be at least 1")
    settings = plan_settings(grid, randoms, args.samples or 1, args.sweep_seed)
    configs = [str(Path(c).resolve()) for c in args.configs]
    return plan_runs(configs, args.seeds, settings, fixed, args.rounds, str(Path(args.out).resolve() / "runs"))


def divergence_marker(runs_dir: Path, name: str) -> Path:
    """Written when a run's weights became NaN/Inf, so that ``collect`` counts it (as not usable) rather than missing."""
    return runs_dir / name / "diverged.txt"


def print_line(line: str) -> None:
    """Prints ``line`` in one write, so that the lines of parallel workers do not run into each other."""
    print(line + "\n", end="", flush=True)


def execute(run: Run, index: int, total: int, metric: str, runs_dir: Path) -> tuple[bool, float]:
    """Trains one run in this process; prints a line when it starts and when it ends. Returns whether lightfed
    accepted it and its wall time in seconds."""
    from lightfed.cli import run as lightfed_run

    tag = f"[{index + 1}/{total}] {run.stem} {setting_label(run.setting)} seed={run.seed}"
    print_line(f"{tag}: started")
    began = time.perf_counter()
    marker = divergence_marker(runs_dir, run.name)
    marker.unlink(missing_ok=True)
    try:
        metrics = lightfed_run(run.argv)
    except LightfedError as error:
        print_line(f"{tag}: failed: {error}")
        if isinstance(error, DivergenceError):
            marker.write_text(f"{error}\n")
        return False, time.perf_counter() - began
    seconds = time.perf_counter() - began
    if metric not in metrics:
        raise SpecError(f"--metric {metric} is not among the run's metrics ({', '.join(sorted(metrics))})")
    print_line(f"{tag}: {metric}={metrics[metric]:.4f} ({seconds:.1f} s)")
    return True, seconds


def execute_all(runs: list[Run], metric: str, runs_dir: Path, workers: int) -> bool:
    """Trains every run, ``workers`` at a time (one after the other in this process if 1), and prints the sweep's wall
    time against the sum of the runs' own; False if lightfed refused a run."""
    began = time.perf_counter()
    jobs = [(run, index, len(runs), metric, runs_dir) for index, run in enumerate(runs)]
    workers = min(workers, len(runs))
    if workers == 1:
        outcomes = [execute(*job) for job in jobs]
    else:
        import torch

        import lightfed.cli  # noqa: F401  (imported once, here: the forked workers start with it, torch and Lightning)

        threads = max(1, available_cores() // workers)
        pool = ProcessPoolExecutor(workers, multiprocessing.get_context("fork"), torch.set_num_threads, (threads,))
        try:  # a worker that dies (out of memory) raises BrokenProcessPool here rather than hanging the sweep
            outcomes = [future.result() for future in [pool.submit(execute, *job) for job in jobs]]
        finally:
            pool.shutdown(cancel_futures=True)  # after an error or Ctrl-C, no further run starts
    wall = time.perf_counter() - began
    run_time = sum(seconds for _, seconds in outcomes)
    print(f"compare: {len(runs)} runs in {wall:.1f} s wall, {run_time:.1f} s of run time ({run_time / wall:.2f}x)",
          flush=True)
    return all(ok for ok, _ in outcomes)


def curve_label(stem: str, label: str, groups: list[tuple[str, str]]) -> str:
    """The setting when there is one config, the config when each has one setting, else both."""
    if len({g[0] for g in groups}) == 1:
        return label
    return stem if len(groups) == len({g[0] for g in groups}) else f"{stem} · {label}"


def collect(runs: list[Run], rounds: dict, out: Path, metric: str, target: float | None, mode: str,
            usable: float | None = None) -> list[Run]:
    """Reads every planned run's logs and writes table.md, accuracy.png and results.json; returns the runs still to
    run (neither finished nor diverged)."""
    results, unfinished = [], []
    for run in runs:
        record = {**asdict(run), "setting_label": setting_label(run.setting), "status": "missing"}
        log = read_log(out / "runs", run.name, metric)
        if log is not None:
            if not log["history"] and log["metrics"]:
                raise SpecError(f"--metric {metric} is not in the logs of {run.name} (they hold {', '.join(log['metrics'])})")
            complete = bool(log["history"]) and log["history"][-1][0] >= rounds[run.group]
            diverged = not complete and divergence_marker(out / "runs", run.name).is_file()
            record.update(log, status="finished" if complete else "diverged" if diverged else "unfinished")
            if complete:
                record.update(summarise_history(log["history"], target, mode), test_at_best=best_round_test_value(log, metric))
        for key in ("metrics", "last_round"):
            record.pop(key, None)
        if record["status"] in ("unfinished", "missing"):
            unfinished.append(run)
        results.append(record)
    groups = list(dict.fromkeys(run.group for run in runs))
    rows, curves = [], {}
    for stem, label in groups:
        members = [r for r in results if (r["stem"], r["setting_label"]) == (stem, label)]
        finished = [r for r in members if r["status"] == "finished"]
        rows.append({"config": stem, "setting": label, **summarise_group(finished, len(members))})
        if finished:
            curves[curve_label(stem, label, groups)] = [r["history"] for r in finished]
    table = render_table(rows, metric, target, mode)
    summary = {"metric": metric, "mode": mode, "target": target, "rows": rows, "runs": results}
    if usable is not None:
        best, rates = usable_rates(results, usable)
        table += "\n" + render_usable(best, rates, metric, usable)
        summary["usable"] = {"fraction": usable, "best": best, "configs": rates}
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table)
    plot_curves(curves, metric, target, out / "accuracy.png")
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    print(table, end="", flush=True)
    print(f"table: {out / 'table.md'}, plot: {out / 'accuracy.png'}, results: {out / 'results.json'}", flush=True)
    return unfinished


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
            if not 0 <= args.task_index < len(runs):
                raise SpecError(f"--task-index {args.task_index} is out of range: the plan has {len(runs)} runs (0..{len(runs) - 1})")
            resolve_rounds([runs[args.task_index]])
            ok, _ = execute(runs[args.task_index], args.task_index, len(runs), args.metric, out / "runs")
            return 0 if ok else 1
        rounds = resolve_rounds(runs)
        if args.list:
            for run in runs:
                print("lightfed " + shlex.join(run.argv))
            return 0
        ok = True
        if not args.collect:
            settings = len({run.group for run in runs})
            print(f"compare: {len(runs)} runs ((config, setting) pairs × seeds = {settings} × "
                  f"{len(args.seeds)}), logs in {out / 'runs'}", flush=True)
            ok = execute_all(runs, args.metric, out / "runs", args.workers)
        unfinished = collect(runs, rounds, out, args.metric, args.target, mode, args.usable)
    except SpecError as error:
        parser.error(str(error))
    except KeyboardInterrupt:  # each run in flight stops after its round, with its checkpoint
        print(f"compare: stopped by Ctrl-C; rerun the command to finish the runs (--set ckpt_path=auto resumes them), "
              f"or build the table of the finished ones with --collect (logs in {out / 'runs'})", file=sys.stderr, flush=True)
        return 130
    if unfinished:
        print(f"compare: {len(unfinished)} of {len(runs)} runs have no finished logs in {out / 'runs'}: "
              + ", ".join(run.name for run in unfinished), file=sys.stderr, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
