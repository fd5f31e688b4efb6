"""The canary estimate's check over seeds on the embedded digits: for each seed, the estimate without noise and at a
noise multiplier whose accountant epsilon is small, against that epsilon plus the estimate's margin.

    python scripts/studies/canary_seeds.py --seeds 0 1 2 --noise 8 --rounds 10 --out runs/canary_seeds
"""

import argparse
import tempfile
from pathlib import Path

from lightfed.audit.plan import AuditSettings, Setting, run_argv
from lightfed.subcommands import fit_in_process

CONFIG = str(Path(__file__).resolve().parents[2] / "configs/privacy/audit-digits.yaml")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--noise", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp())
    print("| seed | z | ε accountant | ε estimate | margin | holds |\n|---|---|---|---|---|---|")
    for seed in args.seeds:
        for noise in (0.0, args.noise):
            settings = AuditSettings((CONFIG,), out, seed=seed, rounds=args.rounds, canaries=50, unobserved=50)
            metrics = fit_in_process(run_argv(settings, Setting(noise), None))[0]
            accountant = metrics.get("user_level_dp/epsilon", float("inf"))
            estimate, upper = metrics["canaries/epsilon_estimate"], metrics["canaries/epsilon_upper"]
            holds = estimate <= accountant + (upper - estimate)
            print(f"| {seed} | {noise:g} | {accountant:.3g} | {estimate:.3g} | {upper - estimate:.3g} | {holds} |")


if __name__ == "__main__":
    main()
