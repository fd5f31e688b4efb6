"""Final global weights of a few short runs, one per family, on 1 and 2 processes: a refactoring check.

Each case is a ``lightfed fit`` of a few rounds in a fresh folder; the script prints the SHA-256 of the final
``last.ckpt``'s parameters and buffers (bytes, so "identical" means bit for bit) and, with ``--compare FILE``, whether
each matches the one a previous invocation saved with ``--save FILE``::

    python scripts/checks/final_weights.py --save before.json     # on the old code
    python scripts/checks/final_weights.py --compare before.json  # on the new code

The torch threads are fixed (``OMP_NUM_THREADS=1``) so that 1 and 2 processes compute alike.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

SHORT = ["--trainer.progress_bar", "false", "--trainer.client_eval_interval", "0"]
CASES = {
    "quickstart": ["-c", "configs/quickstart.yaml", "--trainer.rounds", "3"],
    "sync (FedAdam)": ["-c", "configs/digits/base.yaml", "-c", "configs/digits/fedadam.yaml", "--trainer.rounds", "3"],
    "async (FedBuff)": [
        "-c",
        "configs/async/digits/base.yaml",
        "-c",
        "configs/async/digits/fedbuff.yaml",
        "--trainer.rounds",
        "6",
        "--strategy.init_args.staleness_weighting",
        "false",  # the config's setting before the baselines' options
    ],
    "DP (FedAvg + DP-SGD)": [
        "-c",
        "configs/digits/base.yaml",
        "-c",
        "configs/digits/fedavg.yaml",
        "-c",
        "configs/privacy/dp-sgd.yaml",
        "--trainer.rounds",
        "2",
    ],
    "circuit (FedECADO)": [
        "-c",
        "configs/digits/base.yaml",
        "-c",
        "configs/digits/fedecado.yaml",
        "--trainer.rounds",
        "3",
    ],
    "circuit (Adaptive FedECADO)": [
        "-c",
        "configs/digits/base.yaml",
        "-c",
        "configs/digits/adaptive_fedecado.yaml",
        "--trainer.rounds",
        "3",
    ],
    "user-level DP": [
        "-c",
        "configs/digits/base.yaml",
        "-c",
        "configs/privacy/user-level-fixed.yaml",
        "--trainer.rounds",
        "3",
    ],
    "SecAgg": ["-c", "configs/digits/base.yaml", "-c", "configs/privacy/secagg.yaml", "--trainer.rounds", "3"],
    "personalization (FedRep)": [
        "-c",
        "configs/digits/base.yaml",
        "-c",
        "configs/personalization/base.yaml",
        "-c",
        "configs/personalization/fedrep.yaml",
        "--trainer.rounds",
        "2",
    ],
    "attack (Krum, sign flipping)": [
        "-c",
        "configs/robust/base.yaml",
        "-c",
        "configs/robust/krum.yaml",
        "--trainer.rounds",
        "2",
        "--trainer.attack",
        "lightfed.attacks.SignFlipping",
        "--trainer.attack.fraction",
        "0.2",
    ],
    "sharded robust (TrimmedMean)": [
        "-c",
        "configs/digits/base.yaml",
        "-c",
        "configs/digits/fedavg.yaml",
        "--trainer.rounds",
        "3",
        "--strategy",
        "lightfed.strategies.TrimmedMean",
        "--strategy.trim",
        "0.2",
    ],
}


def final_weights_digest(arguments: list[str], devices: int, root: Path) -> str:
    """Runs ``lightfed fit`` and returns the SHA-256 of its final parameters and buffers."""
    command = [
        sys.executable,
        "-m",
        "lightfed",
        "fit",
        *arguments,
        *SHORT,
        "--trainer.devices",
        str(devices),
        "--trainer.root_dir",
        str(root),
        "--trainer.name",
        "run",
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    if done.returncode != 0:
        return f"failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
    checkpoint = torch.load(next(root.glob("run/version_*/checkpoints/last.ckpt")), weights_only=True)
    digest = hashlib.sha256()
    for name in ("params", "buffers"):
        digest.update(checkpoint[name].contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="write the digests to this JSON file")
    parser.add_argument("--compare", type=Path, help="compare with the digests in this JSON file")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES), help="default: every case")
    args = parser.parse_args()
    before = json.loads(args.compare.read_text()) if args.compare else {}
    digests = {}
    print("| case | processes | final weights (SHA-256) |" + (" same as before |" if before else ""))
    print("|---|---|---|" + ("---|" if before else ""))
    for name in args.cases:
        arguments = CASES[name]
        for devices in args.devices:
            with tempfile.TemporaryDirectory() as root:
                digest = final_weights_digest(arguments, devices, Path(root))
            key = f"{name} x{devices}"
            digests[key] = digest
            same = "" if not before else (" yes |" if before.get(key) == digest else f" NO (was {before.get(key)}) |")
            print(f"| {name} | {devices} | `{digest}` |{same}", flush=True)
    if args.save:
        args.save.write_text(json.dumps(digests, indent=1))


if __name__ == "__main__":
    main()
