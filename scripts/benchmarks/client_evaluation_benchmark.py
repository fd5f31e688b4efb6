"""Per-client evaluation of many clients: seconds per evaluation of every client on batched matmuls, fine-tuned
vectorized (lightfed's default for such a model), beside one client at a time, measured side by side in one process.

The workload: ``lightfed.data.Synthetic(1, 1)`` with ``--client-size`` examples each (``--clients`` clients), 30 % of
each held out for its evaluation, a 60-64-10 MLP; each evaluation covers the global model on every client, a personal
model per client (the global one moved by a draw of the client's own), and, with ``--finetune-steps``, the global
model after that many local steps on each client.

    OMP_NUM_THREADS=1 python scripts/benchmarks/client_evaluation_benchmark.py
    python scripts/benchmarks/client_evaluation_benchmark.py --device cuda --finetune-steps 5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from lightning.fabric import Fabric

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

from lightfed.data import Synthetic  # noqa: E402
from lightfed.data.module import FederatedDataModule  # noqa: E402
from lightfed.models import MLP  # noqa: E402
from lightfed.run.client import ClientTrainer  # noqa: E402
from lightfed.run.evaluation import ClientEvaluation, Evaluation  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--client-size", type=int, default=100)
    p.add_argument("--finetune-steps", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    harness.add_json_option(p)
    return p.parse_args(argv)


def personal(client_id: int, params: torch.Tensor, buffers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    noise = torch.randn(params.shape, generator=torch.Generator().manual_seed(client_id))
    return params + 0.05 * noise.to(params.device), buffers


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    data = FederatedDataModule(
        Synthetic(alpha=1.0, beta=1.0, num_clients=args.clients, client_size=args.client_size), client_val_fraction=0.3
    )
    device = torch.device(args.device)
    data.setup(0, device)
    fabric = Fabric(accelerator="gpu" if device.type == "cuda" else "cpu", devices=1)
    client = ClientTrainer(fabric, MLP(60, 10, hidden=[64]), data)
    settings = ClientEvaluation(personal=personal, finetune_steps=args.finetune_steps)
    params, buffers = client.flat.params.clone(), client.flat.buffers.clone()
    runners = {"batched matmuls (default)": Evaluation(client.fabric, client, settings)}
    runners["one client at a time"] = Evaluation(client.fabric, client, settings)
    runners["one client at a time"].stacked = runners["one client at a time"].tuner = None
    times, sync = {name: harness.Times() for name in runners}, harness.synchronizer(device)
    for _ in range(args.repeats + 1):  # the first of each is a warm-up
        for name, evaluation in runners.items():
            times[name].measure(lambda e=evaluation: e.clients(0, params, buffers, "val_acc", set()), sync)
    seconds = {name: t[1:].median for name, t in times.items()}
    over = harness.ratios(seconds, "one client at a time")
    print(
        f"{args.clients} clients of {args.client_size} examples (30 % evaluated), 60-64-10 MLP on {device.type}, "
        "global + personal"
        f"{f' + fine-tuned {args.finetune_steps} steps' if args.finetune_steps else ''}; median of {args.repeats}, "
        f"torch threads {torch.get_num_threads()}"
    )
    harness.print_table(
        ["evaluation of every client", "s", "x one at a time", "clients/s"],
        [
            [name, harness.cell(s), harness.cell(over[name], ".3g"), harness.cell(args.clients / s, ".4g")]
            for name, s in seconds.items()
        ],
    )
    harness.write_json(args.json, {"seconds": seconds, "over_one_at_a_time": over})


if __name__ == "__main__":
    main()
