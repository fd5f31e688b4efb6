"""Digits: accuracy against epsilon for example-level DP-SGD and user-level DP-FedAvg (fixed and adaptive clipping).

One ``lightfed compare`` over configs/privacy/digits-study.yaml (100 clients, 50 a round, 30 rounds, logistic
regression) with FedAvg and no privacy, DP-SGD at each target epsilon (``target_epsilon``: each client's noise spends
it over its planned steps) and UserLevelDP with the noise multiplier that Opacus' RDP accountant gives for that epsilon
over 30 rounds at q = 0.5 (fixed clip 0.5; adaptive from 0.1 to the median, count noise std 5); then a Markdown table
of the test accuracy and the epsilon each run logged in its last round.

    python scripts/studies/privacy_study.py --out runs/privacy_study            # runs, then the table
    python scripts/studies/privacy_study.py --out runs/privacy_study --table    # the table of finished runs
    python scripts/studies/privacy_study.py --out runs/user_level --mechanisms user-level-fixed user-level-adaptive
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

EPSILONS, DELTA, RATE, ROUNDS = (2, 4, 8), 1e-5, 50 / 100, 30
CONFIGS = "configs/privacy"
MECHANISMS = ("dp-sgd", "user-level-fixed", "user-level-adaptive")


def noise_multipliers() -> list[float]:
    """z for each epsilon: one subsampled Gaussian step per round, Opacus' RDP accountant."""
    from opacus.accountants.utils import get_noise_multiplier

    return [
        get_noise_multiplier(target_epsilon=e, target_delta=DELTA, sample_rate=RATE, steps=ROUNDS) for e in EPSILONS
    ]


def compare_args(out: str, workers: int, mechanisms: tuple[str, ...] = MECHANISMS) -> list[str]:
    z = ",".join(repr(value) for value in noise_multipliers())
    settings = {
        "dp-sgd": [
            "--grid", f"dp-sgd:trainer.privacy.init_args.target_epsilon={','.join(map(str, EPSILONS))}",
            "--set", "dp-sgd:trainer.privacy.init_args.noise_multiplier=null",
        ],
        "user-level-fixed": [
            "--grid", f"user-level-fixed:transforms.init_args.noise_multiplier={z}",
            "--set", "user-level-fixed:transforms.init_args.clip=0.5",
        ],
        "user-level-adaptive": [
            "--grid", f"user-level-adaptive:transforms.init_args.noise_multiplier={z}",
            "--set", "user-level-adaptive:transforms.init_args.count_stddev=5",
        ],
    }  # fmt: skip
    configs = ["configs/digits/fedavg.yaml", *(f"{CONFIGS}/{mechanism}.yaml" for mechanism in mechanisms)]
    grids = [word for mechanism in mechanisms for word in settings[mechanism]]
    return [
        "--base", f"{CONFIGS}/digits-study.yaml", "--configs", *configs, *grids,
        "--metric", "val_acc", "--workers", str(workers), "--out", out,
    ]  # fmt: skip


def results(out: Path) -> list[dict]:
    """Each finished run's method, setting, epsilon logged in the last round, validation accuracy then and test
    accuracy at the end (None without a final record)."""
    rows = []
    for run in sorted((out / "runs").iterdir()):
        records = [json.loads(line) for line in (max(run.glob("version_*")) / "metrics.jsonl").read_text().splitlines()]
        final = next((r for r in records if r.get("final")), None)
        last = [r for r in records if not r.get("final")][-1]
        epsilon = last.get("privacy/epsilon_max", last.get("user_level_dp/epsilon", float("inf")))
        method, _, setting = run.name.removesuffix("__seed0").partition("__")
        rows.append({"method": method, "setting": setting or "-", "epsilon (last round)": epsilon})
        rows[-1] |= {"val_acc": last.get("val_acc", float("nan")), "test_acc": final["test_acc"] if final else None}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/privacy_study")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--table", action="store_true", help="only tabulate the finished runs in --out")
    parser.add_argument(
        "--mechanisms", nargs="+", choices=MECHANISMS, default=list(MECHANISMS), help="run these beside FedAvg"
    )
    harness.add_json_option(parser)
    args = parser.parse_args()
    if not args.table:
        compare = compare_args(args.out, args.workers, tuple(args.mechanisms))
        subprocess.run([sys.executable, "-m", "lightfed", "compare", *compare], check=True)
    rows = results(Path(args.out))
    columns = {"method": "", "setting": "", "epsilon (last round)": ".3g", "val_acc": ".4f", "test_acc": ".4f"}
    harness.print_table(
        list(columns), ([harness.cell(row[key], spec) for key, spec in columns.items()] for row in rows)
    )
    harness.write_json(args.json, rows)


if __name__ == "__main__":
    main()
