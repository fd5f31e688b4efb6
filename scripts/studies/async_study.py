"""The MasFL slides' Figure 1 and Figure 2 setups on digits: tuned baselines against untuned AdaMasFL, then every
method's step sizes frozen while the concurrency M_c grows.

1. Tuning (Figure 1): at M_c = --tune-concurrency and the first seed, FedBuff, CA2FL, FADAS and MasFL each run a grid
   of (local lr, server lr); the pair with the best score is kept. AdaMasFL takes its step sizes from S, K and T.
2. Concurrency (Figure 2): every method, with those step sizes, at each M_c in --concurrency and each seed.

Score: mean val_acc over the last quarter of the evaluations. Runs are ``lightfed fit`` on
``configs/async/digits/base.yaml`` and a strategy file beside it (N = 20 clients, Dirichlet(0.5), S = 5, K = 10).
Outputs::

    OUT/table.md                 accuracy per method and M_c (mean ± std over seeds), spread over M_c, staleness
    OUT/results.json             every run: method, M_c, step sizes, seed, score, history, mean staleness
    OUT/accuracy.png             left: val_acc per aggregation at the tuning M_c; right: score against M_c
    OUT/runs/<name>/version_0/   each run's TensorBoard logs, config and checkpoint (finished runs are not redone,
                                 unfinished ones resume)

Example (about 70 runs of 100 aggregations; --workers runs them in parallel processes)::

    python scripts/studies/async_study.py --out runs/async_study --seeds 0 1 --workers 8
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
METHODS = ["adamasfl", "masfl", "fedbuff", "ca2fl", "fadas"]
LOCAL_LRS = ["0.02", "0.05", "0.1"]
SERVER_LRS = {
    "masfl": ["0.1", "0.3", "1.0"],
    "fedbuff": ["0.5", "1.0", "2.0"],
    "ca2fl": ["0.5", "1.0", "2.0"],
    "fadas": ["0.001", "0.003", "0.01"],
}
LR, SERVER_LR = "model.init_args.optimizer.init_args.lr", "strategy.init_args.server_lr"


@dataclass(frozen=True)
class Run:
    method: str
    concurrency: int
    lrs: tuple[tuple[str, str], ...]  # (override key, value): empty for AdaMasFL
    seed: int

    @property
    def name(self) -> str:
        lrs = "_".join(f"{key.rsplit('.', 1)[-1]}{value}" for key, value in self.lrs)
        return "__".join(p for p in (self.method, f"mc{self.concurrency}", lrs, f"seed{self.seed}") if p)


def argv(run: Run, out: Path, rounds: int | None, fixed: list[tuple[str, str]]) -> list[str]:
    digits = ROOT / "configs" / "async" / "digits"
    args = [
        "fit",
        "--config",
        str(digits / "base.yaml"),
        "--config",
        str(digits / f"{run.method}.yaml"),
        "--asynchronous.concurrency",
        str(run.concurrency),
        "--seed_everything",
        str(run.seed),
        "--trainer.root_dir",
        str(out / "runs"),
        "--trainer.name",
        run.name,
        "--trainer.progress_bar",
        "false",
    ]
    for key, value in [*run.lrs, *fixed]:
        args += [f"--{key}", value]
    return args + ([] if rounds is None else ["--trainer.rounds", str(rounds)])


def read_history(log_dir: Path, metric: str) -> list[tuple[int, float]]:
    """The (round, value) points of a run's ``metric`` in its TensorBoard events, under the tag TensorBoard gets."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lightfed.run.round_tensorboard import tensorboard_tag

    tag = tensorboard_tag(metric)
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0}).Reload()
    return sorted({e.step: e.value for e in events.Scalars(tag)}.items()) if tag in events.Tags()["scalars"] else []


def execute(run: Run, args: list[str]) -> dict:
    """Trains one run (a finished one is only reloaded: --ckpt_path auto) and reads its history back."""
    import torch

    from lightfed.cli import run as lightfed_run

    torch.set_num_threads(1)
    with contextlib.redirect_stdout(io.StringIO()):  # lightfed's own summary lines; the study prints one per run
        lightfed_run([*args, "--ckpt_path", "auto"])
    log_dir = Path(args[args.index("--trainer.root_dir") + 1]) / run.name / "version_0"
    history = read_history(log_dir, "val_acc")
    staleness = [v for _, v in read_history(log_dir, "async/staleness_mean")]
    tail = [v for _, v in history[-max(1, len(history) // 4) :]]
    return {
        **asdict(run),
        "name": run.name,
        "score": statistics.fmean(tail),
        "history": history,
        "time": [v for _, v in read_history(log_dir, "async/virtual_time")],
        "staleness": statistics.fmean(staleness),
    }


def run_all(
    runs: list[Run], out: Path, rounds: int | None, fixed: list[tuple[str, str]], workers: int, stage: str
) -> list[dict]:
    """Runs in this process (``workers`` 1) or in parallel processes; one line per finished run."""
    results = []

    def report(result: dict) -> None:
        results.append(result)
        print(f"[{stage} {len(results)}/{len(runs)}] {result['name']}: score {result['score']:.4f}", flush=True)

    if workers == 1:
        for run in runs:
            report(execute(run, argv(run, out, rounds, fixed)))
    else:
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(execute, run, argv(run, out, rounds, fixed)) for run in runs]
            for future in as_completed(futures):
                report(future.result())
    order = {run.name: i for i, run in enumerate(runs)}
    return sorted(results, key=lambda r: order[r["name"]])


def grid(method: str, tune: bool) -> list[tuple[tuple[str, str], ...]]:
    if method == "adamasfl" or not tune:
        return [()]
    return [((LR, lr), (SERVER_LR, server_lr)) for lr, server_lr in itertools.product(LOCAL_LRS, SERVER_LRS[method])]


def describe(method: str, lrs) -> str:
    """The step sizes a method ran with, as the table shows them."""
    if lrs:
        return " ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in lrs)
    return "theory (S, K, T)" if method == "adamasfl" else "the config's"


def render_table(sweep: list[dict], chosen: dict[str, list], concurrencies: list[int]) -> str:
    header = ["method", "step sizes", *[f"M_c={m}" for m in concurrencies], "spread (max-min)"]
    rows = []
    for method in METHODS:
        means = []
        cells = [method, describe(method, chosen[method])]
        for m in concurrencies:
            scores = [r["score"] for r in sweep if r["method"] == method and r["concurrency"] == m]
            means.append(statistics.fmean(scores))
            std = f" ± {statistics.stdev(scores):.3f}" if len(scores) > 1 else ""
            cells.append(f"{means[-1]:.3f}{std}")
        rows.append([*cells, f"{max(means) - min(means):.3f}"])
    staleness = [statistics.fmean(r["staleness"] for r in sweep if r["concurrency"] == m) for m in concurrencies]
    rows.append(["mean staleness", "", *(f"{s:.2f}" for s in staleness), ""])
    table = harness.markdown_table(header, rows)
    return table + "\n\nscore: mean val_acc over the last quarter of the evaluations; ± std over seeds.\n"


def plot(sweep: list[dict], concurrencies: list[int], tune_concurrency: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (curves, summary) = plt.subplots(1, 2, figsize=(12, 4.5))
    for method in METHODS:
        runs = [r for r in sweep if r["method"] == method]
        first = next(r for r in runs if r["concurrency"] == tune_concurrency)
        curves.plot([s for s, _ in first["history"]], [v for _, v in first["history"]], label=method)
        scores = [statistics.fmean(r["score"] for r in runs if r["concurrency"] == m) for m in concurrencies]
        summary.plot(concurrencies, scores, marker="o", label=method)
    curves.set(xlabel="aggregation", ylabel="val_acc", title=f"M_c = {tune_concurrency}, seed {sweep[0]['seed']}")
    summary.set(xlabel="concurrency M_c", ylabel="score (mean over seeds)", title="step sizes frozen at the tuning M_c")
    for ax in (curves, summary):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="async_study.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="runs/async_study", help="output folder")
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=[0], help="seeds of the concurrency sweep (tuning: first)"
    )
    parser.add_argument("--concurrency", nargs="+", type=int, default=[5, 10, 15, 20], help="M_c values of the sweep")
    parser.add_argument("--tune-concurrency", type=int, default=10, help="M_c at which the baselines are tuned")
    parser.add_argument("--no-tune", action="store_true", help="keep the configs' step sizes (no grid search)")
    parser.add_argument("--rounds", type=int, help="override trainer.rounds (T) of every run")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override of every run")
    parser.add_argument("--workers", type=int, default=1, help="runs at a time, each in its own process")
    harness.add_json_option(parser)  # beside OUT/results.json
    options = parser.parse_args(args)
    if options.tune_concurrency not in options.concurrency:
        parser.error(f"--tune-concurrency {options.tune_concurrency} must be one of --concurrency")
    fixed = []
    for spec in options.set:
        key, sep, value = spec.partition("=")
        if not sep or not key or not value:
            parser.error(f"--set {spec!r}: expected KEY=VALUE, e.g. trainer.local_steps=5")
        fixed.append((key.removeprefix("--"), value))
    out = Path(options.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    tuning = run_all(
        [
            Run(method, options.tune_concurrency, lrs, options.seeds[0])
            for method in METHODS
            for lrs in grid(method, not options.no_tune)
        ],
        out,
        options.rounds,
        fixed,
        options.workers,
        "tune",
    )
    chosen = {
        method: max((r for r in tuning if r["method"] == method), key=lambda r: r["score"])["lrs"] for method in METHODS
    }
    for method in METHODS:
        tried = [r for r in tuning if r["method"] == method]
        print(f"{method}: chose {describe(method, chosen[method])} from {len(tried)} setting(s)", flush=True)
    sweep_runs = [
        Run(method, m, tuple(map(tuple, chosen[method])), seed)
        for method in METHODS
        for m in options.concurrency
        for seed in options.seeds
    ]
    tuned = {r["name"]: r for r in tuning}  # the tuning runs of the chosen step sizes are not run again
    fresh = run_all(
        [run for run in sweep_runs if run.name not in tuned], out, options.rounds, fixed, options.workers, "concurrency"
    )
    sweep = [tuned.get(run.name) or next(r for r in fresh if r["name"] == run.name) for run in sweep_runs]

    table = render_table(sweep, chosen, options.concurrency)
    (out / "table.md").write_text(table)
    for path in (out / "results.json", options.json):
        harness.write_json(path, {"tuning": tuning, "sweep": sweep})
    plot(sweep, options.concurrency, options.tune_concurrency, out / "accuracy.png")
    print(table)
    print(f"table, results and plot: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
