"""The canary estimate's check over seeds on the embedded digits: for each seed, the estimate without noise and at a
noise multiplier whose accountant epsilon is small, against that epsilon plus the estimate's margin; then the mean
and standard deviation over the seeds.

    python scripts/studies/canary_seeds.py --seeds 0 1 2 --noise 8 --rounds 10 --out runs/canary_seeds
"""

import argparse
import tempfile
from pathlib import Path

from lightfed.audit.plan import AuditSettings
from lightfed.audit.seeds import seed_rows, seed_tables
from lightfed.subcommands import fit_in_process

CONFIG = str(Path(__file__).resolve().parents[2] / "configs/privacy/audit-digits.yaml")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", nargs="+", default=[CONFIG])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--noise", nargs="+", type=float, default=[0.0, 8.0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--canaries", type=int, default=50)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp())
    configs = tuple(str(Path(c).resolve()) for c in args.config)
    settings = AuditSettings(configs, out, rounds=args.rounds, canaries=args.canaries, unobserved=args.canaries)
    print(seed_tables(seed_rows(settings, args.seeds, args.noise, fit_in_process)), end="")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
