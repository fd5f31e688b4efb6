"""What simulated secure aggregation costs per round, and its quantization error, against plain FedAvg.

The workload is the digits base config's (``configs/digits/base.yaml``: SmallCNN, 20 clients with Dirichlet(0.3)
label skew, 10 per round, batch 16, SGD lr 0.05) with ``--local-steps`` local steps, FedAvg with uniform weights;
every setting runs the real trainer on the same seed, data and client sampling, in one process, one torch thread:

- ``plain``: ``FedAvg(weighting="uniform")``;
- ``secagg b<bits>``: the ``SecureAggregation`` transform in front of it, every other client a neighbour (SecAgg),
  range [-1, 1];
- ``secagg+ k=4``: SecAgg+ with 4 neighbours per client; ``... drop 0.2``: 2 of the 10 clients drop out each round.

Per setting, the medians over the rounds after the first: the trainer's ``round/time_s`` (its last round, which
evaluates, left out), the transform's client seconds (quantizing and masking one client's contribution) and server
seconds (unmasking and dequantizing the sum), the RMS quantization error per coordinate of a client's contribution;
and the validation accuracy after the last round.

    python scripts/benchmarks/secagg_benchmark.py                       # 6 rounds of 5 local steps
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from functools import partial
from pathlib import Path

import torch

from lightfed import FederatedTrainer
from lightfed.data import Digits, DirichletPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.models import SmallCNN
from lightfed.privacy import SecureAggregation
from lightfed.strategies import FedAvg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

PREFIX = "secure_aggregation/"
SETTINGS = {
    "plain": {},
    "secagg b16": dict(bits=16),
    "secagg b8": dict(bits=8),
    "secagg+ k=4 b16": dict(bits=16, neighbours=4),
    "secagg+ k=4 b16 drop 0.2": dict(bits=16, neighbours=4, dropout=0.2),
}


def run(settings: dict, rounds: int, local_steps: int) -> list[dict[str, float]]:
    transforms = [SecureAggregation(**settings)] if settings else []
    torch.manual_seed(0)
    model = SmallCNN(num_classes=10, in_channels=1, optimizer=partial(torch.optim.SGD, lr=0.05))
    data = FederatedDataModule(Digits(test_fraction=0.2), DirichletPartitioner(20, alpha=0.3), batch_size=16)
    clock = harness.RoundClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = FederatedTrainer.from_settings(
            accelerator="cpu",
            rounds=rounds,
            clients_per_round=10,
            local_epochs=None,
            local_steps=local_steps,
            eval_interval=rounds,
            checkpoint_interval=rounds + 1,
            root_dir=root,
            progress_bar=False,
            clients_in_parallel=1,
            callbacks=[clock],
            logger=False,
        )
        trainer.fit(model, data, FedAvg(weighting="uniform"), transforms=transforms)
    return clock.metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--local-steps", type=int, default=5)
    harness.add_json_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*srun.*")
    columns = {"round s": "round/time_s", "client s (secagg)": PREFIX + "client_seconds"}
    columns |= {"server s (secagg)": PREFIX + "server_seconds", "quantization RMSE": PREFIX + "quantization_rmse"}
    print(harness.markdown_table(["setting", *columns, "val_acc"]), flush=True)
    figures = {}
    for name, settings in SETTINGS.items():
        rounds = run(settings, args.rounds, args.local_steps)
        timed = rounds[1:-1]  # the first round's one-time costs and the last one's evaluation left out
        figures[name] = {
            c: harness.median(r[key] for r in timed) if key in timed[0] else None for c, key in columns.items()
        }
        figures[name]["val_acc"] = rounds[-1]["val_acc"]
        cells = [harness.cell(figures[name][column]) for column in columns]
        print(harness.markdown_row([name, *cells, f"{rounds[-1]['val_acc']:.4f}"]), flush=True)
    harness.write_json(args.json, figures)


if __name__ == "__main__":
    main()
