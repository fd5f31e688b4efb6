"""The stacked client step, eager and compiled: whether ``torch.compile`` pays for many tiny clients.

The step is the batched floor's (``tiny_clients_benchmark.py``): a round's clients on stacked weights of a 60-64-10
MLP, one batch each (``baddbmm``), the summed losses back-propagated once, plain SGD on every row. It runs eager,
compiled with ``torch.compile`` (forward and backward), and on a GPU compiled with ``mode="reduce-overhead"`` (CUDA
graphs, replayed each step). Each prints its compile seconds, its median milliseconds a step and the largest
difference of its weights from eager's after the timed steps, relative to the weights' largest coordinate.

    OMP_NUM_THREADS=1 python scripts/benchmarks/compiled_step_benchmark.py [--device cuda] [--clients 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

FEATURES, HIDDEN, CLASSES, BATCH, LR = 60, 64, 10, 10, 0.05


def loss(x: Tensor, y: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """The summed mean losses of stacked clients: ``x`` ``[clients, BATCH, FEATURES]``, ``y`` their labels."""
    hidden = torch.baddbmm(b1, x, w1.transpose(1, 2)).relu()
    logits = torch.baddbmm(b2, hidden, w2.transpose(1, 2))
    return F.cross_entropy(logits.reshape(-1, CLASSES), y.reshape(-1), reduction="sum") / BATCH


def stepper(computed: Callable[..., Tensor]) -> Callable[[list[Tensor], Tensor, Tensor], None]:
    """One SGD step of every client's rows ``weights`` (in place) on its batch, the loss computed by ``computed``."""

    def step(weights: list[Tensor], x: Tensor, y: Tensor) -> None:
        leaves = [w.detach().requires_grad_() for w in weights]
        computed(x, y, *leaves).backward()
        with torch.no_grad():
            for weight, leaf in zip(weights, leaves, strict=True):
                weight.add_(leaf.grad, alpha=-LR)  # type: ignore[arg-type]

    return step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--steps", type=int, default=200, help="timed steps of each repeat")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    sync = harness.synchronizer(device) or (lambda: None)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(args.clients, BATCH, FEATURES, generator=generator).to(device)
    y = torch.randint(0, CLASSES, (args.clients, BATCH), generator=generator).to(device)
    shapes = [(HIDDEN, FEATURES), (1, HIDDEN), (CLASSES, HIDDEN), (1, CLASSES)]
    start = [0.1 * torch.randn(args.clients, *shape, generator=generator).to(device) for shape in shapes]
    modes: dict[str, Callable[..., Tensor]] = {"eager": loss, "compiled": torch.compile(loss, dynamic=False)}
    if device.type == "cuda":
        modes["compiled, CUDA graphs"] = torch.compile(loss, dynamic=False, mode="reduce-overhead")
    final: dict[str, list[Tensor]] = {}
    print(f"{args.clients} clients of a {FEATURES}-{HIDDEN}-{CLASSES} MLP, batch {BATCH}, on {device}")
    print("| step | compile s | ms a step | x eager | max relative difference from eager |")
    print("|---|---:|---:|---:|---:|")
    eager_ms = 0.0
    for name, computed in modes.items():
        step, weights = stepper(computed), [w.clone() for w in start]
        began = time.perf_counter()
        step(weights, x, y)  # the first call compiles
        sync()
        compile_s = time.perf_counter() - began
        times = []
        for _ in range(args.repeats):
            began = time.perf_counter()
            for _ in range(args.steps):
                step(weights, x, y)
            sync()
            times.append((time.perf_counter() - began) / args.steps * 1e3)
        ms = statistics.median(times)
        eager_ms = eager_ms or ms
        final[name] = weights
        scale = max(float(w.abs().max()) for w in final["eager"])
        difference = max(float((a - b).abs().max()) for a, b in zip(weights, final["eager"], strict=True)) / scale
        print(f"| {name} | {compile_s:.2f} | {ms:.3f} | {ms / eager_ms:.2f} | {difference:.2g} |")


if __name__ == "__main__":
    main()
