"""Many tiny clients: seconds per round of lightfed (its default and vectorized client training) beside the
sequential plain-PyTorch loop and the batched plain-PyTorch floor, measured side by side in one process.

The workload: ``lightfed.data.Synthetic(1, 1)`` with FedProx's lognormal client sizes, or ``--client-size`` examples
each (``--clients`` clients), a 60-64-10 MLP (4.6k weights), ``--clients-per-round`` clients a round, one local epoch
of batch-10 SGD (lr 0.01).

- plain loop: one client at a time, the MLP as ``torch.nn.Sequential``, ``torch.optim.SGD``, the client's batches
  already in memory (no data pipeline), its delta summed into the round's FedAvg mean.
- batched floor: every client of the round at once on stacked weights ``[clients, ...]`` (``torch.baddbmm``, each
  weight's gradient computed in its own layout), ragged clients by masking each row's loss, autograd through the
  stacked weights, one SGD step per local step; the round's batches joined once and each step's gathered by an index
  (made before the round is timed, ``index_select``); the FedAvg mean of the deltas.
- lightfed: ``FederatedTrainer.fit`` rounds (client training, reduction, FedAvg), evaluation off, timed from one
  round's end to the next one's (``clients_in_parallel`` auto, 1: one client at a time, and vectorized), each followed
  by the floor's round on the same clients (``FloorBeside``, taken out of lightfed's time): lightfed's ratio over the
  floor is the median of these pairs, which a slow spell of a shared machine (longer than a round) leaves alone.

Every runner trains the same rounds' clients on the same batches; ratios are over the plain loop and the floor.
``--repeats`` runs every runner that often, interleaved: a figure is the median over the runs.

    OMP_NUM_THREADS=1 python scripts/benchmarks/tiny_clients_benchmark.py
    OMP_NUM_THREADS=1 python scripts/benchmarks/tiny_clients_benchmark.py --client-size 100 --rounds 30 --repeats 5
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

from lightfed.core.seeding import derived_seed, sample_clients  # noqa: E402
from lightfed.data import Synthetic  # noqa: E402
from lightfed.data.module import FederatedDataModule  # noqa: E402
from lightfed.models import MLP  # noqa: E402
from lightfed.strategies import FedAvg  # noqa: E402
from lightfed.trainer import FederatedTrainer  # noqa: E402

LR, BATCH, HIDDEN = 0.01, 10, 64


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--clients-per-round", type=int, default=50)
    p.add_argument("--rounds", type=int, default=6, help="timed rounds of each runner (after one untimed)")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of every runner, interleaved (in alternate order); each figure is the median over them of a run's "
        "median round, each ratio the median of the runs' ratios, so that a slow spell of the machine hits every runner",
    )
    p.add_argument("--client-size", type=int, help="examples of every client (default: FedProx's lognormal sizes)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument(
        "--vmap",
        action="store_true",
        help="lightfed's MLP with a training_step of its own, which vectorized training runs under vmap (not on batched "
        "matmuls)",
    )
    harness.add_json_option(p)
    args = p.parse_args(argv)
    harness.require_at_least(p, args, 1, "rounds", "repeats")
    return args


def data_module(clients: int, client_size: int | None, device: torch.device) -> FederatedDataModule:
    dataset = Synthetic(alpha=1.0, beta=1.0, num_clients=clients, client_size=client_size)
    data = FederatedDataModule(dataset, batch_size=BATCH)
    data.setup(0, device)
    return data


def round_batches(data: FederatedDataModule, round: int, per_round: int) -> list[list[tuple]]:
    """The round's clients' batches (one epoch each, shuffled from a seed of (round, client))."""
    clients = sample_clients(0, round, data.num_clients, per_round)
    return [
        list(data.client_batches(c, torch.Generator().manual_seed(derived_seed(0, round, c)), epochs=1))
        for c in clients
    ]


def plain_round(batches: list[list[tuple]], start: nn.Sequential) -> None:
    """One client at a time; the FedAvg mean of the deltas."""
    params = torch.nn.utils.parameters_to_vector(start.parameters()).detach()
    model = nn.Sequential(nn.Linear(60, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10)).to(params.device)
    total = torch.zeros_like(params)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for client in batches:
        torch.nn.utils.vector_to_parameters(params, model.parameters())
        for x, y in client:
            optimizer.zero_grad(set_to_none=False)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        total += torch.nn.utils.parameters_to_vector(model.parameters()).detach() - params
    total /= len(batches)


def layout(batches: list[list[tuple]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each client's batch of each step lies among the round's examples joined client after client:
    ``[steps, clients, BATCH]`` indices (padding: 0) and each example's weight in its client's mean loss (0:
    padding). Bookkeeping, made before the round is timed."""
    clients, steps = len(batches), max(len(b) for b in batches)
    index = torch.zeros(steps, clients, BATCH, dtype=torch.long)
    weight = torch.zeros(steps, clients, BATCH)
    start = 0
    for k, client in enumerate(batches):
        for step, (x, _) in enumerate(client):
            n = x.shape[0]
            index[step, k, :n] = torch.arange(start, start + n)
            weight[step, k, :n] = 1.0 / n
            start += n
    return index.to(device), weight.to(device)


class StackedLinear(torch.autograd.Function):
    """``x @ w^T + b`` of stacked clients whose backward pass computes ``w``'s gradient in ``w``'s layout, ``grad^T @
    x`` (autograd's ``baddbmm`` gives it transposed, and a copy back costs a quarter of a step)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, w)
        return torch.baddbmm(b, x, w.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple:  # type: ignore[override]
        x, w = ctx.saved_tensors
        grad_x = torch.bmm(grad, w) if ctx.needs_input_grad[0] else None
        return grad_x, torch.bmm(grad.transpose(1, 2), x), grad.sum(1, keepdim=True)


def batched_round(batches: list[list[tuple]], layout: tuple[torch.Tensor, torch.Tensor], start: nn.Sequential) -> None:
    """Every client at once on stacked weights: the round's examples joined once, each step's batches gathered from
    them by ``layout`` (padded); a row's loss masked once the client has no batch left; the FedAvg mean of the
    deltas."""
    index, weight = layout
    xs = torch.cat([x for client in batches for x, _ in client])
    ys = torch.cat([y for client in batches for _, y in client])
    clients = index.shape[1]
    first, second = start[0], start[2]
    w1 = first.weight.detach().expand(clients, -1, -1).clone().requires_grad_()
    b1 = first.bias.detach().expand(clients, 1, -1).clone().requires_grad_()
    w2 = second.weight.detach().expand(clients, -1, -1).clone().requires_grad_()
    b2 = second.bias.detach().expand(clients, 1, -1).clone().requires_grad_()
    for step in range(index.shape[0]):
        at = index[step].flatten()  # index_select: a quarter of indexing's time on a CPU
        hidden = StackedLinear.apply(xs.index_select(0, at).view(clients, BATCH, -1), w1, b1).relu()
        logits = StackedLinear.apply(hidden, w2, b2)
        losses = nn.functional.cross_entropy(logits.reshape(-1, 10), ys.index_select(0, at), reduction="none")
        (losses * weight[step].reshape(-1)).sum().backward()
        with torch.no_grad():
            for w in (w1, b1, w2, b2):
                w.add_(w.grad, alpha=-LR)  # half the time of ``w -= LR * w.grad``
                w.grad = None
    with torch.no_grad():  # the FedAvg mean of the deltas
        for w, global_weight in ((w1, first.weight), (b1, first.bias), (w2, second.weight), (b2, second.bias)):
            (w - global_weight.reshape(w.shape[1:])).mean(0)


class OwnStepMLP(MLP):
    """lightfed's MLP with the same training step, written as its own: vectorized training runs it under vmap."""

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        return super().training_step(batch, batch_idx)


class FloorBeside:
    """A trainer callback (its hooks are called by name) that runs the batched floor's round ``round`` on the same
    clients at the end of each lightfed round, before the round clock reads (it comes first), so that both are timed in
    the same spell of the machine: a slow spell of this shared machine lasts longer than a round, not than a run."""

    def __init__(
        self, rounds: list[list[list[tuple]]], layouts: list, start: nn.Sequential, sync: harness.Sync
    ) -> None:
        self.rounds, self.layouts, self.start, self.sync = rounds, layouts, start, sync
        self.times = harness.Times()

    def on_round_end(self, trainer: object, round: int, metrics: dict) -> None:
        batches, where = self.rounds[round], self.layouts[round]
        self.times.measure(lambda: batched_round(batches, where, self.start), self.sync)


def lightfed_rounds(
    args: argparse.Namespace, data: FederatedDataModule, parallel: int | str, floor: FloorBeside
) -> tuple[list[float], list[float]]:
    """Each timed round's seconds of lightfed and of the floor beside it (the first round is a warm-up)."""
    clock = harness.RoundClock(sync=True)  # waits for a GPU before each reading
    with tempfile.TemporaryDirectory() as root:
        trainer = FederatedTrainer.from_settings(
            accelerator="gpu" if args.device == "cuda" else "cpu",
            rounds=args.rounds + 1,
            clients_per_round=args.clients_per_round,
            local_epochs=1,
            eval_interval=10_000,
            client_eval_interval=0,
            clients_in_parallel=parallel,
            root_dir=root,
            progress_bar=False,
            checkpoint_interval=10_000,
            callbacks=[floor, clock],
        )
        model = (OwnStepMLP if args.vmap else MLP)(
            60, 10, hidden=[HIDDEN], optimizer=lambda p: torch.optim.SGD(p, lr=LR)
        )
        trainer.fit(model, data, FedAvg())
    periods = clock.periods().wall  # each round from the end of the one before, the floor's round beside it included
    lightfed = [period - beside for period, beside in zip(periods, floor.times.wall, strict=True)]
    return lightfed[1:], floor.times.wall[1:]


FLOOR, PLAIN = "batched floor (stacked weights, baddbmm)", "plain PyTorch, one client at a time"
LIGHTFED = {
    "lightfed, clients_in_parallel vectorized": "vectorized",
    "lightfed, one client at a time": 1,
    "lightfed, defaults": "auto",
}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    device = torch.device(args.device)
    data = data_module(args.clients, args.client_size, device)
    start = nn.Sequential(nn.Linear(60, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10)).to(device)
    sync = harness.synchronizer(device)
    rounds = [round_batches(data, r, args.clients_per_round) for r in range(args.rounds + 1)]
    layouts = [layout(batches, device) for batches in rounds]

    def timed(work: Callable[[list[list[tuple]], tuple], None]) -> float:
        times = harness.Times()
        for batches, where in zip(rounds, layouts, strict=True):  # the first is a warm-up
            times.measure(lambda batches=batches, where=where: work(batches, where), sync)
        return times[1:].median

    beside: dict[str, list[float]] = {name: [] for name in LIGHTFED}  # each run's median ratio over the floor beside it

    def beside_the_floor(name: str) -> float:
        lightfed, floor = lightfed_rounds(args, data, LIGHTFED[name], FloorBeside(rounds, layouts, start, sync))
        beside[name].append(harness.median(harness.paired_ratios(lightfed, floor)))
        return harness.median(lightfed)

    runners: dict[str, Callable[[], float]] = {
        FLOOR: partial(timed, lambda batches, where: batched_round(batches, where, start)),
        PLAIN: partial(timed, lambda batches, where: plain_round(batches, start)),
    }
    runners.update({name: partial(beside_the_floor, name) for name in LIGHTFED})
    runs: dict[str, list[float]] = {name: [] for name in runners}
    for _, name in harness.interleave(list(runners), args.repeats, alternate=True):
        runs[name].append(runners[name]())
    seconds = {name: harness.median(values) for name, values in runs.items()}
    over_plain = {name: harness.median(harness.paired_ratios(runs[name], runs[PLAIN])) for name in runs}
    over_floor = {name: harness.median(harness.paired_ratios(runs[name], runs[FLOOR])) for name in (FLOOR, PLAIN)}
    over_floor.update({name: harness.median(ratios) for name, ratios in beside.items()})
    sizes = [data.client_size(c) for c in range(data.num_clients)]
    print(
        f"{args.clients} clients ({min(sizes)}-{max(sizes)} examples), {args.clients_per_round} a round, 1 epoch of "
        f"batch {BATCH}, 60-{HIDDEN}-10 MLP on {device}; median of {args.rounds} rounds"
        f"{f', median over {args.repeats} interleaved runs' if args.repeats > 1 else ''}, torch threads "
        f"{torch.get_num_threads()}{'; lightfed under vmap' if args.vmap else ''}"
    )
    harness.print_table(
        ["runner", "s/round", "x plain loop", "x batched floor"],
        [
            [name, harness.cell(s), harness.cell(over_plain[name], ".3g"), harness.cell(over_floor[name], ".3g")]
            for name, s in seconds.items()
        ],
    )
    each = ", ".join(f"{ratio:.3g}" for ratio in beside["lightfed, defaults"])
    print(f"lightfed's defaults over the floor beside each of its rounds, the median of each run: {each}")
    figures = {"seconds": seconds, "over_plain": over_plain, "over_floor": over_floor, "runs": runs, "beside": beside}
    harness.write_json(args.json, figures)


if __name__ == "__main__":
    main()
