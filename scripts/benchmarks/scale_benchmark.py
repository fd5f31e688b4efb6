"""What a run costs as its population grows: peak RSS, partition time, seconds per round and bytes written per round.

Each cell is one run in its own process (its own peak RSS): ``lightfed.data.Synthetic`` with ``--client-size``
examples per client (float32, drawn by blocks of clients), multinomial logistic regression (``lightfed.models.MLP``
with no hidden layer), ``--clients-per-round`` clients a round for ``--rounds`` rounds, a checkpoint after every
round, central evaluation bounded by ``data.eval_examples`` (its default). Strategies: FedAvg, SCAFFOLD with its
control variates in memory (``scaffold``) and on disk (``scaffold-disk``).

- peak RSS: the run's process, from ``getrusage`` (MB).
- partition: ``FederatedDataModule.setup``: generating the data, holding out the validation split, the clients'
  index lists (s).
- s/round: median over the rounds of the time from one round's start to the next one's (training, aggregation,
  evaluation, checkpoint).
- written/round: median over the rounds of the bytes the process wrote (``wchar`` of ``/proc/self/io``: the
  checkpoint files, SCAFFOLD's state files on disk, ``metrics.jsonl``); a hard link writes none.
- written/last round: the same, for the last round alone (the in-memory store rewrites every client trained so far).

    nice -n 10 python scripts/benchmarks/scale_benchmark.py
    python scripts/benchmarks/scale_benchmark.py --clients 20000 --client-size 0 --clients-per-round 10 \
        --strategies fedavg
    python scripts/benchmarks/scale_benchmark.py --clients 10000 100000 --strategies fedavg scaffold-disk --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

STRATEGIES = ("fedavg", "scaffold", "scaffold-disk")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clients-per-round", type=int, default=100)
    p.add_argument(
        "--client-size", type=int, default=10, help="examples per client (training and test share); 0: FedProx's sizes"
    )
    p.add_argument("--dim", type=int, default=60, help="features per example")
    p.add_argument(
        "--holdout-draws",
        choices=("per_client", "vectorized"),
        default="vectorized",
        help="data.holdout_draws: how each client's validation share is drawn (as configs/scale/ sets it)",
    )
    harness.add_json_option(p)
    p.add_argument("--worker", nargs=2, metavar=("CLIENTS", "STRATEGY"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def written_bytes() -> int:
    with open("/proc/self/io") as file:
        return int(next(line for line in file if line.startswith("wchar:")).split()[1])


def worker(args: argparse.Namespace, clients: int, strategy_name: str) -> dict:
    """One run; its figures as a dict."""
    from functools import partial

    import torch

    from lightfed.data import Synthetic
    from lightfed.data.module import FederatedDataModule
    from lightfed.experiments.measurement import peak_rss_mb
    from lightfed.models import MLP
    from lightfed.strategies import FedAvg, Scaffold
    from lightfed.trainer import FederatedTrainer

    root = tempfile.mkdtemp(prefix="scale-benchmark-")
    synthetic = Synthetic(num_clients=clients, client_size=args.client_size or None, dim=args.dim)
    data = FederatedDataModule(synthetic, holdout_draws=args.holdout_draws)
    setup, partition = data.setup, []

    def timed_setup(*arguments, **keywords) -> None:
        began = time.perf_counter()
        setup(*arguments, **keywords)
        partition.append(time.perf_counter() - began)

    data.setup = timed_setup  # type: ignore[method-assign]
    starts: list[tuple[float, int]] = []

    class Clock:
        def on_round_start(self, **_) -> None:
            starts.append((time.perf_counter(), written_bytes()))

        def on_fit_end(self, **_) -> None:
            starts.append((time.perf_counter(), written_bytes()))

    strategy = {
        "fedavg": lambda: FedAvg(),
        "scaffold": lambda: Scaffold(),
        "scaffold-disk": lambda: Scaffold(client_states="disk", client_states_folder=root),
    }[strategy_name]()
    trainer = FederatedTrainer.from_settings(
        accelerator="cpu",
        rounds=args.rounds,
        clients_per_round=args.clients_per_round,
        local_epochs=1,
        root_dir=root,
        progress_bar=False,
        logger=False,
        callbacks=[Clock()],
    )
    model = MLP(in_features=args.dim, num_classes=10, optimizer=partial(torch.optim.SGD, lr=0.05))
    trainer.fit(model, data, strategy)
    periods = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(starts, starts[1:], strict=False)]
    return {
        "clients": clients,
        "strategy": strategy_name,
        "peak_rss_mb": peak_rss_mb(),
        "partition_s": partition[0],
        "s_per_round": harness.median(seconds for seconds, _ in periods),
        "written_per_round": harness.median(written for _, written in periods[:-1] or periods),
        "written_last_round": periods[-1][1],
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args, int(args.worker[0]), args.worker[1])), flush=True)
        return
    load = os.getloadavg()[0]
    rows = []
    for clients in args.clients:
        for strategy in args.strategies:
            command = [sys.executable, __file__, *sys.argv[1:], "--worker", str(clients), strategy]
            began = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"{clients} clients, {strategy}: failed\n{done.stderr[-3000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append({**row, "total_s": time.perf_counter() - began})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(
        f"Synthetic(client_size={args.client_size or None}, dim={args.dim}), holdout_draws {args.holdout_draws}, "
        f"logistic regression, {args.clients_per_round} "
        f"clients a round, {args.rounds} rounds, a checkpoint every round; load average {load:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after, {os.cpu_count()} cores\n"
    )
    header = ["clients", "strategy", "peak RSS (MB)", "partition (s)", "s/round", "written/round"]
    header += ["written/last round", "run (s)"]
    table = [
        [f"{row['clients']:,}", row["strategy"], f"{row['peak_rss_mb']:,.0f}", f"{row['partition_s']:.1f}"]
        + [f"{row['s_per_round']:.2f}", _size(row["written_per_round"]), _size(row["written_last_round"])]
        + [f"{row['total_s']:.0f}"]
        for row in rows
    ]
    harness.print_table(header, table, "rlrrrrrr")
    harness.write_json(args.json, rows)


def _size(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024
    raise AssertionError


if __name__ == "__main__":
    main()
