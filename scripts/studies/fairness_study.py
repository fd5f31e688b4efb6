"""Digits, a skewed split: how the final model does on each client's own held-out data, for FedAvg, q-FedAvg,
agnostic FL and Ditto (its personal models).

Each method is one ``lightfed fit`` of configs/digits/base.yaml (20 clients, 10 a round, 30 rounds, SmallCNN, 2 local
epochs of SGD lr 0.05) with its overlay, Dirichlet alpha 0.1 and 20 % of each client's examples held out
(``data.client_val_fraction``), in its own folder, per seed; the table reads each run's final record: the central
test set's accuracy and the distribution over clients of ``val_acc`` on their held-out shares (Ditto: its personal
models), mean ± std over the seeds (0 to 4 unless --seeds).

    python scripts/studies/fairness_study.py --out runs/fairness_study
    python scripts/studies/fairness_study.py --out runs/fairness_study --rounds 3 --seeds 0    # a quick look
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

DITTO = json.dumps([{"class_path": "lightfed.personalization.Ditto", "init_args": {"lam": 0.1}}])
METHODS = {  # name -> (overlay, extra options)
    "FedAvg": ("fedavg", []),
    "q-FedAvg q=1, L=1": ("qfedavg", []),
    "q-FedAvg q=1, L=1/lr (paper)": ("qfedavg", ["--strategy.init_args.lipschitz", "null"]),
    "q-FedAvg q=5, L=1": ("qfedavg", ["--strategy.init_args.q", "5"]),
    "Agnostic FL (lambda_lr 0.01)": ("agnostic_fl", []),
    "Ditto (lam 0.1), personal models": ("fedavg", ["--transforms", DITTO]),
}
SPLIT = ["--data.partitioner.init_args.alpha", "0.1", "--data.client_val_fraction", "0.2"]
STATS = ("mean", "std", "worst10", "best10")


def run(out: Path, method: str, seed: int, rounds: int) -> dict:
    """The final record of one method and seed (runs it unless its folder has it)."""
    overlay, extra = METHODS[method]
    folder = out / f"{re.sub(r'[^A-Za-z0-9.=]+', '_', method).strip('_')}_seed{seed}"
    metrics = folder / "run" / "version_0" / "metrics.jsonl"
    reused = metrics.is_file()
    if not reused:
        command = [sys.executable, "-m", "lightfed", "fit", "-c", "configs/digits/base.yaml"]
        command += ["-c", f"configs/digits/{overlay}.yaml", *SPLIT, *extra, "--seed_everything", str(seed)]
        command += ["--trainer.rounds", str(rounds), "--trainer.root_dir", str(folder), "--trainer.name", "run"]
        environment = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run([*command, "--trainer.progress_bar", "false"], check=True, capture_output=True, env=environment)
    lines = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    final = next(line for line in reversed(lines) if line.get("final"))
    progress = f"{method} seed={seed}: test_acc={final['test_acc']:.4f}{' (reused)' if reused else ''}"
    print(progress + "\n", end="", flush=True)  # in one write: parallel runs' lines stay apart
    return final


def cell(values: list[float]) -> str:
    """mean ± std over the seeds."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {std:.3f}"


def clients_prefix(record: dict) -> str:
    """The metrics' prefix of the clients' accuracies: their personal models' where the run keeps them."""
    return "clients/personal/val_acc" if "clients/personal/val_acc_mean" in record else "clients/val_acc"


def figures(method: str, records: list[dict]) -> dict:
    """The method's figures: each statistic's mean over the seeds, and every client's accuracy of every seed."""
    prefix = clients_prefix(records[0])
    return {
        "method": method,
        "test_acc": statistics.fmean(r["test_acc"] for r in records),
        **{stat: statistics.fmean(r[f"{prefix}_{stat}"] for r in records) for stat in STATS},
        "per_client": [accuracy for r in records for accuracy in r["per_client"][prefix]],
    }


def row(method: str, records: list[dict]) -> list[str]:
    """The method's table row: test accuracy, then the clients' distribution (the personal models' where kept)."""
    prefix = clients_prefix(records[0])
    return [
        method,
        cell([r["test_acc"] for r in records]),
        *(cell([r[f"{prefix}_{stat}"] for r in records]) for stat in STATS),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--workers", type=int, default=2, help="runs at a time")
    harness.add_json_option(parser)
    args = parser.parse_args()
    jobs = [(method, seed) for method in METHODS for seed in args.seeds]
    with ThreadPoolExecutor(args.workers) as pool:
        done = list(pool.map(lambda job: run(args.out, job[0], job[1], args.rounds), jobs))
    records = {method: [r for (m, _), r in zip(jobs, done, strict=True) if m == method] for method in METHODS}
    harness.print_table(
        ["method", "test_acc", "clients: mean", "std", "worst 10 %", "best 10 %"],
        [row(method, rs) for method, rs in records.items()],
    )
    print(harness.command_line("scripts/studies/fairness_study.py", sys.argv[1:]))
    harness.write_json(args.json, [figures(method, rs) for method, rs in records.items()])


if __name__ == "__main__":
    main()
