"""What simulated secure aggregation costs per round, and its quantization error, against plain FedAvg.

The workload is the digits base config's (``configs/digits/base.yaml``: SmallCNN, 20 clients with Dirichlet(0.3)
label skew, 10 per round, batch 16, SGD lr 0.05) with ``--local-steps`` local steps, FedAvg with uniform weights;
every setting runs the real trainer on the same seed, data and client sampling, in one process, one torch thread:

- ``plain``: ``FedAvg(weighting="uniform")``;
- ``secagg b<bits>``: ``SecureAggregation`` around it, every other client a neighbour (SecAgg), range [-1, 1];
- ``secagg+ k=4``: SecAgg+ with 4 neighbours per client; ``... drop 0.2``: 2 of the 10 clients drop out each round.

Per setting, the medians over the rounds after the first: the trainer's ``round/time_s`` (its last round, which
evaluates, left out), the strategy's client seconds (quantizing and masking one client's contribution) and server
seconds (unmasking and dequantizing the sum), the RMS quantization error per coordinate of a client's contribution;
and the validation accuracy after the last round.

    python scripts/benchmarks/secagg_benchmark.py                       # 6 rounds of 5 local steps
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import warnings
from functools import partial

import torch

from lightfed import FederatedTrainer
from lightfed.callbacks import Callback
from lightfed.data import Digits, DirichletPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.models import SmallCNN
from lightfed.privacy import SecureAggregation
from lightfed.strategies import FedAvg, Strategy

PREFIX = "strategy/secure_aggregation/"
SETTINGS = {
    "plain": {},
    "secagg b16": dict(bits=16),
    "secagg b8": dict(bits=8),
    "secagg+ k=4 b16": dict(bits=16, neighbours=4),
    "secagg+ k=4 b16 drop 0.2": dict(bits=16, neighbours=4, dropout=0.2),
}


class Metrics(Callback):
    """Notes every round's metrics."""

    def __init__(self) -> None:
        self.rounds: list[dict[str, float]] = []

    def on_round_end(self, trainer, round, metrics) -> None:
        self.rounds.append(dict(metrics))


def run(settings: dict, rounds: int, local_steps: int) -> list[dict[str, float]]:
    strategy: Strategy = FedAvg(weighting="uniform")
    if settings:
        strategy = SecureAggregation(strategy, **settings)
    torch.manual_seed(0)
    model = SmallCNN(num_classes=10, in_channels=1, optimizer=partial(torch.optim.SGD, lr=0.05))
    data = FederatedDataModule(Digits(test_fraction=0.2), DirichletPartitioner(20, alpha=0.3), batch_size=16)
    metrics = Metrics()
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
            callbacks=[metrics],
            logger=False,
        )
        trainer.fit(model, data, strategy)
    return metrics.rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--local-steps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*srun.*")
    print("| setting | round s | client s (secagg) | server s (secagg) | quantization RMSE | val_acc |")
    print("|---|---|---|---|---|---|")
    for name, settings in SETTINGS.items():
        rounds = run(settings, args.rounds, args.local_steps)
        timed = rounds[1:-1]

        def median(key: str, timed: list[dict[str, float]] = timed) -> str:
            return f"{statistics.median(r[key] for r in timed):.4g}" if key in timed[0] else "-"

        cells = [median("round/time_s"), median(PREFIX + "client_seconds"), median(PREFIX + "server_seconds")]
        cells += [median(PREFIX + "quantization_rmse"), f"{rounds[-1]['val_acc']:.4f}"]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
