"""Where Adaptive FedECADO loses accuracy against a tuned FedECADO: an ablation on digits (Dirichlet 0.3, 1-3 local
epochs drawn afresh each round), one part changed at a time, each arm a ``lightfed compare`` sweep.

Arms (``--arms``, default all):
  adaptive        Adaptive FedECADO as in the paper: every client step error-controlled, the Hutchinson diagonal
                  (``step_control: every_round``, ``curvature: diagonal``; every arm below but ``defaults`` keeps both)
  defaults        Adaptive FedECADO with its defaults (the first round's step, no curvature estimate)
  fedecado        FedECADO with the same heterogeneous local work, over learning rates (the tuned baseline)
  fixed_lr        Adaptive FedECADO's server, clients at a fixed learning rate (dt = lr / p_i): adaptive steps off
  fedecado_server Adaptive FedECADO's clients, FedECADO's server settings (window end at the data-weighted mean window,
                  paths extrapolated beyond it)
  constant_L      Adaptive FedECADO with a constant inductance: the momentum design off
  extra           whatever ``--extra KEY=V1,V2`` grids give (the fix candidates)

Per round, from each run's metrics.jsonl (mean over seeds): the server's captured share of the clients' data-weighted
mean progress (``progress_share``), the server's mean step and step count, the clients' mean step (Adaptive's dt, in
its ODE's time; SGD's learning rate is about dt / 20 here) and the window (simulated time), the training loss and
val_acc; and each setting's final val_acc and test_acc (the final record).

    python scripts/studies/adaptive_fedecado_ablation.py --seeds 0 1 --out runs/ablation
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "digits"
HETEROGENEOUS = ["--set", "trainer.local_epochs=randint:1:3", "--set", "trainer.redraw_local_work=true"]
S = "strategy.init_args."
ADAPTIVE = str(CONFIGS / "adaptive_fedecado.yaml")
PAPER = [ADAPTIVE, "--set", f"{S}step_control=every_round", "--set", f"{S}curvature=diagonal"]
ARMS: dict[str, list[str]] = {
    "adaptive": PAPER,
    "defaults": [ADAPTIVE],
    "fedecado": [
        str(CONFIGS / "fedecado.yaml"),
        *HETEROGENEOUS,
        "--grid",
        "model.init_args.optimizer.init_args.lr=0.05,0.1,0.15,0.2",
    ],
    "fixed_lr": [*PAPER, "--grid", f"{S}fixed_lr=0.025,0.05,0.1"],
    "fedecado_server": [*PAPER, "--set", f"{S}window_end=mean", "--set", f"{S}beyond_window=extrapolate"],
    "constant_L": [*PAPER, "--set", f"{S}damping=constant", "--grid", f"{S}inductance=0.1,1,10"],
}
COLUMNS = {
    "share": "strategy/progress_share",
    "server dt": "strategy/step_mean",
    "server steps": "strategy/server_steps",
    "client dt": "strategy/client_step_mean",
    "window": "strategy/window_max",
    "train_loss": "train_loss",
    "val_acc": "val_acc",
}


def run_arm(name: str, argv: list[str], seeds: list[str], rounds: int, out: Path, workers: int) -> None:
    command = [
        sys.executable,
        "-m",
        "lightfed",
        "compare",
        "--base",
        str(CONFIGS / "base.yaml"),
        "--configs",
        argv[0],
        *argv[1:],
        "--seeds",
        *seeds,
        "--rounds",
        str(rounds),
        "--out",
        str(out / name),
        "--workers",
        str(workers),
    ]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=False)  # a diverged run is a result (compare then exits 1)


def histories(arm: Path) -> dict[str, list[list[dict]]]:
    """setting -> one list of per-round records (final record last) per seed, from the newest version of each run."""
    by_setting: dict[str, list[list[dict]]] = {}
    for run in sorted((arm / "runs").iterdir()):
        setting = run.name.rsplit("__seed", 1)[0]
        versions = [path for path in run.glob("version_*") if (path / "metrics.jsonl").is_file()]
        if not versions:  # failed before its first round
            continue
        version = max(versions, key=lambda path: int(path.name.split("_")[1]))
        lines = [json.loads(line) for line in (version / "metrics.jsonl").read_text().splitlines() if line.strip()]
        by_setting.setdefault(setting, []).append(lines)
    return by_setting


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def summarise(out: Path, arms: list[str], rounds_shown: list[int]) -> list[dict]:
    """A row per setting and round shown: the setting's seeds finished, final val_acc and test_acc (means over its
    seeds), and the round's figures (``COLUMNS``, means over the seeds that logged them)."""
    rows = []
    for name in arms:
        if not (out / name / "runs").is_dir():
            continue
        for setting, runs in histories(out / name).items():
            records = [[r for r in run if not r.get("final")] for run in runs]
            finals = [next((r for r in run if r.get("final")), {}) for run in runs]
            finished = [run for run, final in zip(records, finals, strict=True) if final]
            final_val = mean([run[-1]["val_acc"] for run in finished])
            test = mean([f["test_acc"] for f in finals if "test_acc" in f])
            head = {"arm": name, "setting": setting, "seeds finished": f"{len(finished)}/{len(runs)}"}
            for shown in rounds_shown:
                rows.append({**head, "final val_acc": final_val, "test_acc": test, "round": shown})
                for column, key in COLUMNS.items():
                    values = [r[key] for run in records for r in run if r["round"] == shown and key in r]
                    rows[-1][column] = mean(values) if values else None
    return rows


def table(rows: list[dict]) -> str:
    """The rows as Markdown, a setting's own figures on its first row; a round's to 3 significant digits (an empty
    cell where none was logged)."""
    cells = []
    for row, before in zip(rows, [{}, *rows], strict=False):
        first = (row["arm"], row["setting"]) != (before.get("arm"), before.get("setting"))
        head = [row["setting"], row["seeds finished"], f"{row['final val_acc']:.3f}", f"{row['test_acc']:.3f}"]
        cells.append([*(head if first else [""] * 4), row["round"]])
        cells[-1] += [harness.cell(row[column], ".3g", missing="") for column in COLUMNS]
    return harness.markdown_table(
        ["arm / setting", "seeds finished", "final val_acc", "test_acc", "round", *COLUMNS], cells
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=[*ARMS, "extra"])
    parser.add_argument("--seeds", nargs="+", default=["0", "1"])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("runs/adaptive_fedecado_ablation"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="a --grid of Adaptive FedECADO's own for the 'extra' arm (strategy.init_args. is added)",
    )
    parser.add_argument("--show-rounds", nargs="+", type=int, default=[1, 5, 10, 20, 30])
    parser.add_argument("--summarise-only", action="store_true")
    harness.add_json_option(parser)
    args = parser.parse_args()
    arms = {**ARMS, "extra": [ADAPTIVE] + [part for grid in args.extra for part in ("--grid", S + grid)]}
    if not args.summarise_only:
        for name in args.arms:
            run_arm(name, arms[name], args.seeds, args.rounds, args.out, args.workers)
    rows = summarise(args.out, args.arms, [r for r in args.show_rounds if r <= args.rounds])
    (args.out / "ablation.md").write_text(table(rows) + "\n")
    print(table(rows))
    harness.write_json(args.json, rows)


if __name__ == "__main__":
    main()
