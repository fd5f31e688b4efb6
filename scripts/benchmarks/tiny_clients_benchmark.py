"""Many tiny clients: seconds per round of lightfed (its defaults and one client at a time), strategy by strategy,
beside the sequential plain-PyTorch loop and the batched plain-PyTorch floor, measured side by side in one process.

The workload: ``lightfed.data.Synthetic(1, 1)`` with lognormal client sizes (``--lognormal-sizes``: by default
int(lognormal(3.5, 1.15)) + 16, whose 1,000 clients train on 12-822 examples, median 33, mean 53; FedProx's are
4 2 50: 36-18,134), or ``--client-size`` examples
each (``--clients`` clients), a 60-64-10 network (4.6k weights), ``--clients-per-round`` clients a round, one local
epoch of batch-10 SGD (lr 0.05). The model (``--model``): ``user``, a plain ``LightningModule`` around its own
two-layer ``nn.Module`` (``UserModule``), or ``mlp``, lightfed's ``MLP`` (batched matmuls; ``--vmap``: under vmap).

- plain loop: one client at a time, the same two-layer network, ``torch.optim.SGD``, the client's batches already in
  memory (no data pipeline), its delta added into the round's FedAvg mean (weighted by examples).
- batched floor: every client of the round at once on stacked weights ``[clients, ...]`` (``torch.baddbmm``, each
  weight's gradient computed in its own layout), the clients sorted longest first, so that at each step those still
  training are a prefix of the stacked weights (``[:active]``, the leaves autograd goes through); each example's
  weight 1/n in its client's mean loss (0: padding of a partial batch); one SGD step per local step; the round's
  batches joined once and each step's gathered by an index (made before the round is timed, ``index_select``); the
  FedAvg mean of the deltas.
- lightfed: ``FederatedTrainer.fit`` rounds with lightfed's defaults (a checkpoint each round, TensorBoard) but
  evaluation, which is off (the floor evaluates nothing: the last round, always evaluated, is not timed) and the
  progress bar; timed from one round's end to the next one's, each followed by the floor's round on the same clients
  (``FloorBeside``, taken out of lightfed's time): lightfed's ratio over the floor is the median of these pairs, which
  a slow spell of a shared machine (longer than a round) leaves alone. ``clients_in_parallel`` auto (defaults) and 1.

Strategies (``--strategy``, ``--strategies``) with their configs' settings: fedprox (mu 0.01), scaffold, fedsam
(rho 0.05), adaptfed (beta 2, rho 0.05), fedecado (tolerance 0.01, no curvature: configs/synthetic), adaptive-fedecado
(tolerance 0.01), the buffered asynchronous fedbuff (server lr 2, staleness weighting), masfl (server lr 1) and
adamasfl, each job K = 10 local steps with 2 S clients training at once (configs/async/digits), and dp-sgd (FedAvg
under ``DPSGD``: noise 1, clip 1, Poisson batches). The floor and the plain loop stay FedAvg's one-epoch references for
every strategy; ``x FedAvg defaults`` is a row's ratio over the floor over FedAvg defaults' (always run).

Every runner trains the same rounds' clients on the same batches (asynchronous rounds: their arrivals; DP-SGD: its
Poisson batches). ``--repeats`` runs every runner that often, interleaved: a figure is the median over the runs.

    OMP_NUM_THREADS=1 python scripts/benchmarks/tiny_clients_benchmark.py
    OMP_NUM_THREADS=1 python scripts/benchmarks/tiny_clients_benchmark.py --strategies all --rounds 3
    OMP_NUM_THREADS=1 python scripts/benchmarks/tiny_clients_benchmark.py --client-size 100 --rounds 30 --repeats 5
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from lightning import LightningModule
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

from lightfed.asynchronous.schedule import Asynchrony  # noqa: E402
from lightfed.core.seeding import derived_seed, sample_clients  # noqa: E402
from lightfed.data import Synthetic  # noqa: E402
from lightfed.data.module import FederatedDataModule  # noqa: E402
from lightfed.models import MLP  # noqa: E402
from lightfed.privacy.dp_sgd import DPSGD  # noqa: E402
from lightfed.run.vectorized_clients import VectorizedClients  # noqa: E402
from lightfed.strategies import (  # noqa: E402
    AdaMasFL,
    AdaptFed,
    AdaptiveFedECADO,
    FedAvg,
    FedBuff,
    FedECADO,
    FedProx,
    FedSAM,
    MasFL,
    Scaffold,
    Strategy,
)
from lightfed.trainer import FederatedTrainer  # noqa: E402

LR, BATCH, HIDDEN = 0.05, 10, 64
ASYNC_STEPS = 10  # K, each asynchronous job's local steps (configs/async/digits/base.yaml)


def buffered(args: argparse.Namespace) -> dict[str, Any]:
    """The asynchronous families' trainer settings: K local steps a job, M_c = 2 S clients training at once."""
    asynchrony = Asynchrony(concurrency=2 * args.clients_per_round)
    return {"asynchrony": asynchrony, "local_epochs": None, "local_steps": ASYNC_STEPS}


DP_SGD = {"noise_multiplier": 1.0, "max_grad_norm": 1.0, "target_delta": 1e-5, "convert_batchnorm": True}
FAMILIES: dict[str, Callable[[argparse.Namespace], tuple[Strategy, dict[str, Any]]]] = {
    "fedavg": lambda args: (FedAvg(), {}),
    "fedprox": lambda args: (FedProx(mu=0.01), {}),
    "scaffold": lambda args: (Scaffold(), {}),
    "fedsam": lambda args: (FedSAM(rho=0.05), {}),
    "adaptfed": lambda args: (AdaptFed(beta=2.0, rho=0.05), {}),
    "fedecado": lambda args: (FedECADO(tolerance=0.01, curvature="none"), {}),
    "adaptive-fedecado": lambda args: (AdaptiveFedECADO(tolerance=0.01), {}),
    "fedbuff": lambda args: (FedBuff(server_lr=2.0, staleness_weighting=True), buffered(args)),
    "masfl": lambda args: (MasFL(server_lr=1.0), buffered(args)),
    "adamasfl": lambda args: (AdaMasFL(), buffered(args)),
    "dp-sgd": lambda args: (FedAvg(), {"privacy": DPSGD(**DP_SGD)}),
}


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
        "median round, each ratio the median of the runs' ratios, so that a slow spell of the machine hits every "
        "runner",
    )
    p.add_argument("--client-size", type=int, help="examples of every client (default: lognormal sizes)")
    p.add_argument(
        "--lognormal-sizes",
        nargs=3,
        type=float,
        default=[3.5, 1.15, 16],
        metavar=("MEAN", "SIGMA", "OFFSET"),
        help="client sizes int(lognormal(MEAN, SIGMA)) + OFFSET (FedProx's: 4 2 50)",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--model", choices=["user", "mlp"], help="user: UserModule (the default); mlp: lightfed's MLP")
    p.add_argument(
        "--vmap",
        action="store_true",
        help="lightfed's MLP (--model mlp) with a training_step of its own, which vectorized training runs under vmap "
        "(not on batched matmuls)",
    )
    p.add_argument("--strategy", choices=list(FAMILIES), default="fedavg", help="the strategy family to run")
    p.add_argument("--strategies", help="'all' or a comma-separated list of families, instead of --strategy")
    harness.add_json_option(p)
    args = p.parse_args(argv)
    harness.require_at_least(p, args, 1, "rounds", "repeats")
    if args.vmap and args.model == "user":
        p.error("--vmap is for --model mlp (UserModule's own training_step runs as it is)")
    args.model = args.model or ("mlp" if args.vmap else "user")
    names = list(FAMILIES) if args.strategies == "all" else (args.strategies or args.strategy).split(",")
    unknown = [name for name in names if name not in FAMILIES]
    if unknown:
        p.error(f"unknown strategies {unknown}: choose from {', '.join(FAMILIES)}")
    args.families = list(dict.fromkeys(["fedavg", *names]))  # FedAvg: the reference of x FedAvg defaults
    return args


class TwoLayer(nn.Module):
    """60-64-10: linear, ReLU, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(60, HIDDEN), nn.Linear(HIDDEN, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class UserModule(LightningModule):
    """A user's own module: cross-entropy, SGD; lightfed requires a ``validation_step`` too."""

    def __init__(self) -> None:
        super().__init__()
        self.net = TwoLayer()

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=LR)


class OwnStepMLP(MLP):
    """lightfed's MLP with the same training step, written as its own: vectorized training runs it under vmap."""

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        return super().training_step(batch, batch_idx)


def model(args: argparse.Namespace) -> LightningModule:
    if args.model == "user":
        return UserModule()
    return (OwnStepMLP if args.vmap else MLP)(60, 10, hidden=[HIDDEN], optimizer=lambda p: torch.optim.SGD(p, lr=LR))


def data_module(args: argparse.Namespace, device: torch.device) -> FederatedDataModule:
    mean, sigma, offset = args.lognormal_sizes
    sizes = (mean, sigma, int(offset))
    dataset = Synthetic(1.0, 1.0, args.clients, client_size=args.client_size, lognormal_sizes=sizes)
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


def examples(client: list[tuple]) -> int:
    return sum(x.shape[0] for x, _ in client)


def plain_round(batches: list[list[tuple]], start: TwoLayer) -> torch.Tensor:
    """One client at a time; the FedAvg mean of the deltas (flat)."""
    params = torch.nn.utils.parameters_to_vector(start.parameters()).detach()
    model = TwoLayer().to(params.device)
    total = torch.zeros_like(params)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for client in batches:
        torch.nn.utils.vector_to_parameters(params.clone(), model.parameters())  # (it makes them views of it)
        for x, y in client:
            optimizer.zero_grad(set_to_none=False)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        total.add_(torch.nn.utils.parameters_to_vector(model.parameters()).detach() - params, alpha=examples(client))
    return total / sum(examples(client) for client in batches)


class Layout(NamedTuple):
    """Where each client's batch of each step lies among the round's examples joined client after client, the
    clients sorted longest first: ``[steps, clients, BATCH]`` indices (padding: 0), each example's weight in its
    client's mean loss (0: padding), the clients still training at each step (a prefix), and each client's share of
    the round's examples (its FedAvg weight). Bookkeeping, made before the round is timed."""

    index: torch.Tensor
    weight: torch.Tensor
    active: list[int]
    share: torch.Tensor


def layout(batches: list[list[tuple]], device: torch.device) -> Layout:
    clients, steps = len(batches), max(len(b) for b in batches)
    starts = list(itertools.accumulate((examples(b) for b in batches), initial=0))
    order = sorted(range(clients), key=lambda k: -len(batches[k]))
    index = torch.zeros(steps, clients, BATCH, dtype=torch.long)
    weight = torch.zeros(steps, clients, BATCH)
    for row, k in enumerate(order):
        start = starts[k]
        for step, (x, _) in enumerate(batches[k]):
            n = x.shape[0]
            index[step, row, :n] = torch.arange(start, start + n)
            weight[step, row, :n] = 1.0 / n
            start += n
    active = [sum(len(b) > step for b in batches) for step in range(steps)]
    sizes = torch.tensor([float(examples(batches[k])) for k in order])
    return Layout(index.to(device), weight.to(device), active, (sizes / sizes.sum()).to(device))


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


def batched_round(batches: list[list[tuple]], where: Layout, start: TwoLayer) -> torch.Tensor:
    """Every client at once on stacked weights, longest first: the round's examples joined once, each step's batches
    gathered from them by ``where`` (padded), for the prefix of clients still training; the FedAvg mean of the
    deltas (flat)."""
    xs = torch.cat([x for client in batches for x, _ in client])
    ys = torch.cat([y for client in batches for _, y in client])
    clients = where.index.shape[1]
    first, second = start.fc1, start.fc2
    globals_ = [first.weight, first.bias.unsqueeze(0), second.weight, second.bias.unsqueeze(0)]
    stacked = [w.detach().expand(clients, *w.shape).clone() for w in globals_]
    for step, active in enumerate(where.active):
        w1, b1, w2, b2 = leaves = [w[:active].detach().requires_grad_() for w in stacked]  # views of the prefix
        at = where.index[step, :active].flatten()  # index_select: a quarter of indexing's time on a CPU
        hidden = StackedLinear.apply(xs.index_select(0, at).view(active, BATCH, -1), w1, b1).relu()
        logits = StackedLinear.apply(hidden, w2, b2)
        losses = F.cross_entropy(logits.reshape(-1, 10), ys.index_select(0, at), reduction="none")
        (losses * where.weight[step, :active].reshape(-1)).sum().backward()
        with torch.no_grad():
            for w in leaves:
                w.add_(w.grad, alpha=-LR)  # into the stacked weights; half the time of ``w -= LR * w.grad``
    with torch.no_grad():  # the FedAvg mean of the deltas
        deltas = [torch.tensordot(where.share, w - g, dims=1) for w, g in zip(stacked, globals_, strict=True)]
    return torch.cat([delta.flatten() for delta in deltas])


class FloorBeside:
    """A trainer callback (its hooks are called by name) that runs the batched floor's round ``round`` on the same
    clients at the end of each lightfed round (but the last, untimed), before the round clock reads (it comes first),
    so that both are timed in the same spell of the machine: a slow spell of this shared machine lasts longer than a
    round, not than a run."""

    def __init__(self, rounds: list[list[list[tuple]]], layouts: list[Layout], start: TwoLayer, sync: harness.Sync):
        self.rounds, self.layouts, self.start, self.sync = rounds, layouts, start, sync
        self.times = harness.Times()

    def on_round_end(self, trainer: object, round: int, metrics: dict) -> None:
        if round < len(self.rounds):
            batches, where = self.rounds[round], self.layouts[round]
            self.times.measure(lambda: batched_round(batches, where, self.start), self.sync)


class Trains:
    """A trainer callback that tells how the run's client training trained: it counts the jobs handed to it and, when
    vectorized, those it trains one at a time (after a fallback, which the trainer prints, under a local rule that does
    not vectorize, or a client alone in its tier of steps)."""

    def on_fit_start(self, trainer: FederatedTrainer) -> None:
        self.training, self.jobs, self.alone = trainer.workers, 0, 0
        train, alone = self.training.train, self.training.reference.train

        def counted(jobs: list, *rest: Any) -> None:
            self.jobs += len(jobs)
            train(jobs, *rest)

        def counted_alone(*job: Any) -> Any:
            self.alone += 1
            return alone(*job)

        self.training.train = counted  # type: ignore[method-assign]
        if isinstance(self.training, VectorizedClients):
            self.training.reference.train = counted_alone  # type: ignore[method-assign]

    def __str__(self) -> str:
        if not isinstance(self.training, VectorizedClients):
            lanes = self.training.lanes
            return "one client at a time" if lanes == 1 else f"{lanes} client threads"
        if self.alone == 0:
            return "vectorized"
        if self.alone == self.jobs:
            return "one client at a time (vectorized training took every job alone)"
        return f"vectorized, {self.alone} of {self.jobs} jobs alone"


def lightfed_rounds(
    args: argparse.Namespace, data: FederatedDataModule, family: str, parallel: int | str, floor: FloorBeside
) -> tuple[list[float], list[float], str]:
    """Each timed round's seconds of lightfed and of the floor beside it (the first round is a warm-up, the last,
    evaluated, is not timed), and how it trained."""
    clock, trains = harness.RoundClock(sync=True), Trains()  # waits for a GPU before each reading
    strategy, settings = FAMILIES[family](args)
    with tempfile.TemporaryDirectory() as root:
        trainer = FederatedTrainer.from_settings(
            accelerator="gpu" if args.device == "cuda" else "cpu",
            rounds=args.rounds + 2,
            clients_per_round=args.clients_per_round,
            eval_interval=10_000,
            clients_in_parallel=parallel,
            root_dir=root,
            progress_bar=False,
            callbacks=[floor, clock, trains],
            **settings,
        )
        trainer.fit(model(args), data, strategy)
    periods = clock.periods().wall  # each round from the end of the one before, the floor's round beside it included
    lightfed = [period - beside for period, beside in zip(periods[:-1], floor.times.wall, strict=True)]
    return lightfed[1:], floor.times.wall[1:], str(trains)


FLOOR, PLAIN = "batched floor (stacked weights sorted longest first)", "plain PyTorch, one client at a time"
MODES = {"defaults": "auto", "one at a time": 1}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(0)
    device = torch.device(args.device)
    data = data_module(args, device)
    start = TwoLayer().to(device)
    sync = harness.synchronizer(device)
    rounds = [round_batches(data, r, args.clients_per_round) for r in range(args.rounds + 1)]
    layouts = [layout(batches, device) for batches in rounds]

    def timed(work: Callable[[list[list[tuple]], Layout], object]) -> float:
        times = harness.Times()
        for batches, where in zip(rounds, layouts, strict=True):  # the first is a warm-up
            times.measure(lambda batches=batches, where=where: work(batches, where), sync)
        return times[1:].median

    lightfed = {f"lightfed {family}, {mode}": (family, MODES[mode]) for family in args.families for mode in MODES}
    beside: dict[str, list[float]] = {name: [] for name in lightfed}  # each run's median ratio over the floor beside
    trained: dict[str, str] = {}
    failed: dict[str, str] = {}

    def beside_the_floor(name: str) -> float:
        if name in failed:
            beside[name].append(math.nan)
            return math.nan
        try:
            seconds, floor, trained[name] = lightfed_rounds(
                args, data, *lightfed[name], FloorBeside(rounds, layouts, start, sync)
            )
        except Exception as error:  # reported below the table, the other runners go on
            failed[name] = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"
            print(f"{name} failed: {failed[name]}", flush=True)
            return beside_the_floor(name)
        beside[name].append(harness.median(harness.paired_ratios(seconds, floor)))
        return harness.median(seconds)

    runners: dict[str, Callable[[], float]] = {
        FLOOR: partial(timed, lambda batches, where: batched_round(batches, where, start)),
        PLAIN: partial(timed, lambda batches, where: plain_round(batches, start)),
    }
    runners.update({name: partial(beside_the_floor, name) for name in lightfed})
    runs: dict[str, list[float]] = {name: [] for name in runners}
    for _, name in harness.interleave(list(runners), args.repeats, alternate=True):
        runs[name].append(runners[name]())
    seconds = {name: harness.median(values) for name, values in runs.items()}
    over_plain = {name: harness.median(harness.paired_ratios(runs[name], runs[PLAIN])) for name in runs}
    over_floor = {name: harness.median(harness.paired_ratios(runs[name], runs[FLOOR])) for name in (FLOOR, PLAIN)}
    over_floor.update({name: harness.median(ratios) for name, ratios in beside.items()})
    reference = beside["lightfed fedavg, defaults"]
    over_fedavg = {name: harness.median(harness.paired_ratios(ratios, reference)) for name, ratios in beside.items()}
    auto_over_one = {
        f"lightfed {family}, defaults": harness.median(
            harness.paired_ratios(beside[f"lightfed {family}, defaults"], beside[f"lightfed {family}, one at a time"])
        )
        for family in args.families
    }
    sizes = [data.client_size(c) for c in range(data.num_clients)]
    network = "UserModule" if args.model == "user" else f"lightfed's MLP{' under vmap' if args.vmap else ''}"
    print(
        f"{args.clients} clients ({min(sizes)}-{max(sizes)} examples), {args.clients_per_round} a round, 1 epoch of "
        f"batch {BATCH}, SGD lr {LR}, 60-{HIDDEN}-10 {network} on {device}; median of {args.rounds} rounds"
        f"{f', median over {args.repeats} interleaved runs' if args.repeats > 1 else ''}, torch threads "
        f"{torch.get_num_threads()}"
    )
    header = ["runner", "s/round", "x plain loop", "x batched floor", "auto / one at a time", "x FedAvg defaults"]
    harness.print_table(
        [*header, "auto trains"],
        [
            [
                name,
                harness.cell(s),
                harness.cell(over_plain[name], ".3g"),
                harness.cell(over_floor[name], ".3g"),
                harness.cell(auto_over_one.get(name), ".3g"),
                harness.cell(over_fedavg.get(name), ".3g"),
                trained.get(name, "-") if name in auto_over_one else "-",
            ]
            for name, s in seconds.items()
        ],
    )
    each = ", ".join(f"{ratio:.3g}" for ratio in reference)
    print(f"lightfed's FedAvg defaults over the floor beside each of its rounds, the median of each run: {each}")
    for name, error in failed.items():
        print(f"{name} failed: {error}")
    figures = {
        "seconds": seconds,
        "over_plain": over_plain,
        "over_floor": over_floor,
        "over_fedavg_defaults": over_fedavg,
        "auto_over_one_at_a_time": auto_over_one,
        "trains": trained,
        "failed": failed,
        "runs": runs,
        "beside": beside,
    }
    harness.write_json(args.json, figures)


if __name__ == "__main__":
    main()
