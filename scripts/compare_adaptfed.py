"""ADAPT-FED against FedAvg, FedProx, FedSAM and FedASAM on digits, without DP and under two DP mechanisms, over
seeds: one scripts/compare.py table per privacy setting, and ADAPT-FED's RP statistics.

Every setting runs the same five configs (configs/digits/*.yaml, the same eta_0) with the DP config added after
them. ``--set`` and ``--rounds`` are passed on to compare.py. Example::

    python scripts/compare_adaptfed.py --seeds 0 1 2 --rounds 10 --set model.init_args.width=8 --out runs/adaptfed-cmp
"""

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ["fedavg", "fedprox", "fedsam", "fedasam", "adaptfed"]
SETTINGS = {  # name: compare.py --set overrides
    "no-dp": [],
    "paper-dp": ["config=configs/adaptfed/dp-sigma2-0.01.yaml"],  # clip the step gradient to 1, noise sigma^2 = 0.01
    "dp-sgd": ["config=configs/privacy/dp-sgd.yaml", "trainer.privacy.init_args.noise_multiplier=0.5",
               "model.init_args.lr=0.3"],  # Opacus, per-example clipping at 1; clipped gradients need a larger rate
}


def rp_statistics(runs_dir: Path, seeds: list[int]) -> str:
    """Mean over seeds of ADAPT-FED's last logged RP variance over rounds and of its mean learning rate."""
    values = {"strategy/rp_var": [], "strategy/lr_mean": []}
    for seed in seeds:
        for metric, found in values.items():
            log = compare.read_log(runs_dir, compare.run_name("adaptfed", {}, seed), metric)
            if log and log["history"]:
                found.append(log["history"][-1][1])
    return ", ".join(f"{m} {statistics.fmean(v):.4g}" for m, v in values.items() if v)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--out", default="runs/adaptfed-compare")
    args = parser.parse_args()
    configs = [str(ROOT / "configs" / "digits" / f"{name}.yaml") for name in ALGORITHMS]
    status = 0
    for setting in args.settings:
        out = Path(args.out) / setting
        argv = ["--configs", *configs, "--seeds", *map(str, args.seeds), "--out", str(out)]
        argv += ["--rounds", str(args.rounds)] if args.rounds else []
        for override in [*SETTINGS[setting], *args.set]:
            argv += ["--set", override]
        print(f"\n## {setting}\n", flush=True)
        status |= compare.main(argv)
        print(f"ADAPT-FED: {rp_statistics(out / 'runs', args.seeds)}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
