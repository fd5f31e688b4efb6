"""Seconds of one Backward-Euler trial step of the FedECADO server solve against the hand-written FedAvg aggregate
(x + mean of the deltas) on the same arrays, median of interleaved repeats.

    python scripts/circuit_step_benchmark.py --clients 10 --size 9200000     # VGG-11 size
"""

import argparse
import statistics
import time

import torch

from lightfed.ecado.circuit import Branches, WindowSolver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=10, help="active clients a")
    parser.add_argument("--size", type=int, default=9_200_000, help="coordinates d")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    g = torch.Generator(args.device).manual_seed(0)
    a, d, device = args.clients, args.size, args.device

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device)

    branches = Branches(randn(d), randn(a, d) * 0.01, torch.rand(a, generator=g, device=device, dtype=torch.float64) + 0.5,
                        randn(a, d) * 0.01, torch.rand(a, 1, generator=g, device=device) + 0.1, torch.full((a, 1), 0.3, device=device))
    solvers = {norm: WindowSolver(branches.start, torch.zeros(d, device=device), branches, norm) for norm in ("max", "rms")}
    for solver in solvers.values():
        solver.trial(0.1)
        solver.accept(0.1)
    work = {
        "FedAvg aggregate (x + mean of the deltas)": lambda: branches.start + branches.deltas.mean(0),
        "BE trial step, max norm": lambda: solvers["max"].trial(0.2),
        "BE trial step, rms norm": lambda: solvers["rms"].trial(0.2),
    }
    times: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(args.repeats):
        for name, run in work.items():
            if device == "cuda":
                torch.cuda.synchronize()
            began = time.perf_counter()
            run()
            if device == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - began)
    reference = statistics.median(next(iter(times.values())))
    print(f"a = {a} clients, d = {d:,} coordinates, fp32, {device}, {torch.get_num_threads()} threads")
    print(f"{'work':45s} {'median ms':>10s} {'x FedAvg':>9s}")
    for name, measured in times.items():
        print(f"{name:45s} {statistics.median(measured) * 1000:10.3f} {statistics.median(measured) / reference:9.2f}")


if __name__ == "__main__":
    main()
