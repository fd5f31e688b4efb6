"""Seconds of one Backward-Euler trial step of the FedECADO server solve, and of a whole server step (a round's
``aggregate_shard``, default settings, one process) of FedECADO and Adaptive FedECADO, against the hand-written FedAvg
aggregate (x + mean of the deltas, into an array it keeps) on the same arrays, median of interleaved repeats. The
server steps see the same synthetic round every time (VGG-11's client settings: 500 images, batch 32, lr 5.5e-4);
their state carries over. The trial-step rows repeat one solver's step on its own arrays, which does not predict a
trial inside a server step (a cache-blocked trial 35 % faster here was no faster there): to time a change to the
solver, read the server-step rows.

    python scripts/benchmarks/circuit_step_benchmark.py --clients 10 --size 9488266     # VGG-11 size
"""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from lightfed.ecado.circuit import Branches, WindowSolver
from lightfed.strategies import AdaptiveFedECADO, FedECADO
from lightfed.strategies.base import ServerContext
from lightfed.strategies.sharded_base import ShardedRound, ShardedStrategy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

REFERENCE = "FedAvg aggregate (x + mean of the deltas)"


def server_step(strategy: ShardedStrategy, deltas: torch.Tensor, params: torch.Tensor, g: torch.Generator) -> Callable:
    """One round's ``aggregate_shard`` of ``strategy`` on one process, ``deltas`` from ``len(deltas)`` clients."""
    a, d = deltas.shape
    strategy.setup(ServerContext(params, a))

    def per_client(low: float, high: float) -> torch.Tensor:
        return torch.rand(a, generator=g, dtype=torch.float64, device=params.device) * (high - low) + low

    lr, steps, beta = 5.5e-4, 16.0, 32 / 500
    window = per_client(0.5, 1.5) * steps * lr * beta
    reports = {
        "time_scale": torch.full_like(window, beta),
        "curvature_mean": per_client(0.01, 0.1),
        "window": window,
        "weight": torch.full_like(window, beta),
        "decay": per_client(0.2, 0.9),
        "first_step": window / steps,
        "step_min": window / steps,
        "step_max": window / steps,
        "step_count": torch.full_like(window, steps),
        "rejected": torch.zeros_like(window),
        "forced": torch.zeros_like(window),
        "max_lte": per_client(0, 0.01),
    }
    if "curvature" in strategy.report_vectors:
        reports["curvature"] = torch.rand(a, d, generator=g, device=params.device) * 0.1
    examples, local_steps = torch.full_like(window, 500.0), torch.full_like(window, steps)
    updates = ShardedRound(
        1,
        list(range(a)),
        deltas,
        examples,
        local_steps,
        local_steps * lr,
        torch.zeros_like(window),
        {},
        lambda tensor, op: tensor,
        reports,
    )
    return lambda: strategy.aggregate_shard(params, updates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10, help="active clients a")
    parser.add_argument("--size", type=int, default=9_200_000, help="coordinates d")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    harness.add_json_option(parser)
    args = parser.parse_args()
    g = torch.Generator(args.device).manual_seed(0)
    a, d, device = args.clients, args.size, args.device

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device)

    branches = Branches(
        randn(d),
        randn(a, d) * 0.01,
        torch.rand(a, generator=g, device=device, dtype=torch.float64) + 0.5,
        randn(a, d) * 0.01,
        torch.rand(a, 1, generator=g, device=device) + 0.1,
        torch.full((a, 1), 0.3, device=device),
    )
    solvers = {
        norm: WindowSolver(branches.start, torch.zeros(d, device=device), branches, norm) for norm in ("max", "rms")
    }
    for solver in solvers.values():
        solver.trial(0.1)
        solver.accept(0.1)
    kept = torch.empty_like(branches.start)  # the reference, too, writes no fresh memory
    work = {
        REFERENCE: lambda: torch.mean(branches.deltas, 0, out=kept).add_(branches.start),
        "BE trial step, max norm": lambda: solvers["max"].trial(0.2),
        "BE trial step, rms norm": lambda: solvers["rms"].trial(0.2),
    }
    strategies = {"FedECADO server step": FedECADO(), "Adaptive FedECADO server step": AdaptiveFedECADO()}
    small = branches.deltas * 0.001  # a round of small steps, as VGG-11's (one or two server steps a round)
    work.update({name: server_step(strategy, small, branches.start, g) for name, strategy in strategies.items()})
    times = harness.time_interleaved(work, args.repeats, sync=harness.synchronizer(device))
    medians = {name: measured.median for name, measured in times.items()}
    ratios = harness.ratios(medians, REFERENCE)
    print(f"a = {a} clients, d = {d:,} coordinates, fp32, {device}, {torch.get_num_threads()} threads\n")
    rows = ([name, f"{medians[name] * 1000:.3f}", f"{ratios[name]:.2f}"] for name in work)
    harness.print_table(["work", "median ms", "x FedAvg"], rows, "lrr")
    print()
    steps = {name: strategy.metrics()["server_steps"] for name, strategy in strategies.items()}
    for name, count in steps.items():
        print(f"{name}: {count:.0f} trial steps accepted in the last round")
    figures = {name: {"seconds": times[name].wall, "median_s": medians[name], "ratio": ratios[name]} for name in work}
    harness.write_json(args.json, {"clients": a, "size": d, "device": device, "work": figures, "server_steps": steps})


if __name__ == "__main__":
    main()
