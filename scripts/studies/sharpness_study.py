"""How sharp the global model's loss gets over a run: FedECADO at fixed learning rates against Adaptive FedECADO as in
the paper (every client step error-controlled, the Hutchinson diagonal) and with its defaults (the first round's step
for every later one, no curvature), on digits with heterogeneous local work (Dirichlet 0.3, 1-3 local epochs drawn
afresh each round, 30 rounds), and the paper's server with clients at a fixed learning rate (``fixed_lr``: only the
client's step rule differs).

Each arm is one ``lightfed fit`` whose ``SaveParams`` callback keeps the global weights of every round; afterwards
the sharpness, the largest Hessian eigenvalue of the mean cross-entropy over the 1437 digits outside the run's test
set (its validation share included), is found by power iteration on Hessian-vector products. Printed per round: the sharpness, the
clients' mean learning rate p_i dt_i (Adaptive's from its metrics, FedECADO's the configured lr), their product (a
Forward-Euler step along the sharpest direction multiplies it by 1 - lr x sharpness: stable below 2), val_acc.

    python scripts/studies/sharpness_study.py --seeds 0 1 --out runs/sharpness
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from torch import Tensor

from lightfed import Callback
from lightfed.data import Digits
from lightfed.models import SmallCNN

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "digits"
HETEROGENEOUS = ["--trainer.local_epochs", "randint:1:3", "--trainer.redraw_local_work", "true"]
PAPER = [
    str(CONFIGS / "adaptive_fedecado.yaml"),
    "--strategy.init_args.step_control",
    "every_round",
    "--strategy.init_args.curvature",
    "diagonal",
]
ARMS = {
    "fedecado-lr0.05": [
        str(CONFIGS / "fedecado.yaml"),
        *HETEROGENEOUS,
        "--model.init_args.optimizer.init_args.lr",
        "0.05",
    ],
    "fedecado-lr0.1": [
        str(CONFIGS / "fedecado.yaml"),
        *HETEROGENEOUS,
        "--model.init_args.optimizer.init_args.lr",
        "0.1",
    ],
    "adaptive": PAPER,
    "adaptive-defaults": [str(CONFIGS / "adaptive_fedecado.yaml")],
    "adaptive-fixed-lr0.025": [*PAPER, "--strategy.init_args.fixed_lr", "0.025"],
}
LEARNING_RATES = {"fedecado-lr0.05": 0.05, "fedecado-lr0.1": 0.1, "adaptive-fixed-lr0.025": 0.025}


class SaveParams(Callback):
    """Keeps the global weights of every round as ``<folder>/round_NNN.pt`` (with ``trainer.checkpoint_interval 1``)."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def on_save_checkpoint(self, trainer, checkpoint) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        torch.save(checkpoint["params"].clone(), self.folder / f"round_{trainer.round:03d}.pt")


def train(arm: str, seed: int, rounds: int, out: Path) -> Path:
    """Runs one arm; returns its folder (weights per round in ``params/``, metrics in the run's metrics.jsonl)."""
    folder = out / arm / f"seed{seed}"
    callback = json.dumps(
        [{"class_path": "sharpness_study.SaveParams", "init_args": {"folder": str(folder / "params")}}]
    )
    config, *extra = ARMS[arm]
    command = [
        sys.executable,
        "-m",
        "lightfed",
        "fit",
        "-c",
        str(CONFIGS / "base.yaml"),
        "-c",
        config,
        *extra,
        "--seed_everything",
        str(seed),
        "--trainer.rounds",
        str(rounds),
        "--trainer.checkpoint_interval",
        "1",
        "--trainer.root_dir",
        str(folder / "run"),
        "--trainer.progress_bar",
        "false",
        "--trainer.logger",
        "false",
        "--trainer.callbacks",
        callback,
    ]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run(command, check=False, env=environment, stdout=subprocess.DEVNULL)
    return folder


def sharpness(model: SmallCNN, params: Tensor, x: Tensor, y: Tensor, iterations: int = 30) -> float:
    """The largest eigenvalue of the loss's Hessian at ``params`` (power iteration from a fixed start)."""
    torch.nn.utils.vector_to_parameters(params, model.parameters())
    weights = list(model.parameters())
    loss = torch.nn.functional.cross_entropy(model(x), y)
    grads = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, weights, create_graph=True)])
    v = torch.randn(grads.numel(), generator=torch.Generator().manual_seed(0))
    eigenvalue = 0.0
    for _ in range(iterations):
        v = v / v.norm()
        hv = torch.cat([h.reshape(-1) for h in torch.autograd.grad(grads, weights, v, retain_graph=True)])
        eigenvalue, v = float(v @ hv), hv
    return eigenvalue


def records(folder: Path) -> dict[int, dict]:
    """round -> the run's metrics record of that round (from the newest version's metrics.jsonl)."""
    files = sorted((folder / "run").rglob("metrics.jsonl"), key=lambda path: path.stat().st_mtime)
    by_round: dict[int, dict] = {}
    for line in files[-1].read_text().splitlines() if files else []:
        record = json.loads(line)
        by_round.setdefault(record.get("round", -1), {}).update(record)  # the final record adds test metrics
    return by_round


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--show-rounds", nargs="+", type=int, default=[1, 2, 5, 10, 15, 20, 25, 30])
    parser.add_argument("--out", type=Path, default=Path("runs/sharpness"))
    parser.add_argument("--summarise-only", action="store_true")
    harness.add_json_option(parser)
    args = parser.parse_args()
    model, figures = SmallCNN(), []
    columns = {"round": "d", "sharpness": ".2f", "client lr": ".4f", "lr x sharpness": ".2f", "val_acc": ".3f"}
    for arm in args.arms:
        for seed in args.seeds:
            folder = args.out / arm / f"seed{seed}" if args.summarise_only else train(arm, seed, args.rounds, args.out)
            splits = Digits().load(seed)  # the run's own train/test split
            history = records(folder)
            print(f"\n{arm}, seed {seed}\n\n{harness.markdown_table(list(columns), align='rrrrr')}")
            for round in args.show_rounds:
                path = folder / "params" / f"round_{round:03d}.pt"
                if not path.exists():
                    continue
                value = sharpness(model, torch.load(path), splits.train_x, splits.train_y)
                record = history.get(round, {})
                lr = LEARNING_RATES.get(arm, record.get("strategy/client_lr_mean", float("nan")))
                row = dict(
                    zip(columns, (round, value, lr, lr * value, record.get("val_acc", float("nan"))), strict=True)
                )
                print(harness.markdown_row(harness.cell(row[key], spec) for key, spec in columns.items()), flush=True)
                figures.append({"arm": arm, "seed": seed, **row})
    harness.write_json(args.json, figures)


if __name__ == "__main__":
    main()
