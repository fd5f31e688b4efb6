"""ADAPT-FED against FedAvg, FedProx, FedSAM and FedASAM on digits, without DP and under two DP mechanisms, over
seeds: one ``lightfed compare`` table per privacy setting, ADAPT-FED's RP statistics, and a control.

Every setting runs the same five configs (configs/digits/*.yaml on configs/digits/base.yaml) at the same eta_0 with
the DP config added after them. ADAPT-FED's rate is about beta * eta_0 = 2 eta_0 while RP is small, so each setting
also runs FedSAM at a fixed 2 eta_0 (OUT/SETTING-control): it separates the RP rule from the doubling of the rate.
``--set`` and ``--rounds`` are passed on to lightfed compare. Example::

    python scripts/studies/compare_adaptfed.py --seeds 0 1 2 --rounds 10 --set model.init_args.width=8 \
        --out runs/adaptfed-cmp
"""

import argparse
import statistics
import sys
from pathlib import Path

from lightfed.experiments import compare
from lightfed.experiments.plan import run_name
from lightfed.experiments.run_logs import read_log

ROOT = Path(__file__).resolve().parents[2]
ALGORITHMS = ["fedavg", "fedprox", "fedsam", "fedasam", "adaptfed"]
SETTINGS = {  # name: (lightfed compare --set overrides, eta_0)
    "no-dp": ([], 0.05),
    "paper-dp": (["config=configs/adaptfed/dp-sigma2-0.01.yaml"], 0.05),  # the step gradient clipped to 1, sigma^2 0.01
    "dp-sgd": (["config=configs/privacy/dp-sgd.yaml", "trainer.privacy.init_args.noise_multiplier=0.5"], 0.3),
}  # DP-SGD: Opacus, per-example clipping at 1; clipped per-example gradients need a larger rate


def rp_statistics(runs_dir: Path, seeds: list[int]) -> str:
    """Mean over seeds of ADAPT-FED's last logged RP variance over rounds and of its mean learning rate."""
    values = {"strategy/rp_var": [], "strategy/lr_mean": []}
    for seed in seeds:
        for metric, found in values.items():
            log = read_log(runs_dir, run_name("adaptfed", {}, seed), metric)
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
    parser.add_argument("--controls-only", action="store_true", help="run only the FedSAM-at-2-eta_0 controls")
    args = parser.parse_args()
    configs = [str(ROOT / "configs" / "digits" / f"{name}.yaml") for name in ALGORITHMS]
    status = 0
    for setting in args.settings:
        overrides, lr = SETTINGS[setting]
        out = Path(args.out) / setting
        runs = [] if args.controls_only else [(configs, lr, out)]
        for configs_run, lr_run, out_run in [*runs, ([configs[2]], 2 * lr, out.parent / f"{setting}-control")]:
            argv = [
                "--base",
                str(ROOT / "configs" / "digits" / "base.yaml"),
                "--configs",
                *configs_run,
                "--seeds",
                *map(str, args.seeds),
                "--out",
                str(out_run),
            ]
            argv += ["--rounds", str(args.rounds)] if args.rounds else []
            for override in [*overrides, f"model.init_args.optimizer.init_args.lr={lr_run}", *args.set]:
                argv += ["--set", override]
            print(f"\n## {out_run.name} (model lr {lr_run:g})\n", flush=True)
            status |= compare.main(argv)
        if not args.controls_only:
            print(f"ADAPT-FED: {rp_statistics(out / 'runs', args.seeds)}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
