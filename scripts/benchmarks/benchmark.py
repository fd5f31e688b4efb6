"""lightfed against minimal hand-written PyTorch FedAvg loops on the same federated workload.

The workload follows pfl-research's CIFAR-10 benchmark: CIFAR-shaped synthetic images (3x32x32, 10 classes, made
from the seed, no download), ``--clients`` clients of ``--examples-per-client`` images, ``--clients-per-round``
clients per round, 1 local epoch, batch 10, SGD lr 0.1, example-weighted FedAvg, ``lightfed.models.SmallCNN``.
For scale: pfl-research runs at about 1.4x such a loop and Flower's simulation engine at about 2.2x.

The paths (``--paths``):

- ``reference``: the hand-written loop, one client after another in each process (on its intra-op threads); the
  model's parameters and gradients are views of one flat vector each, so loading the global weights is one copy_,
  the delta one torch.sub and the SGD step one op.
- ``concurrent``: the same loop training a round's clients concurrently in one process: ``--workers`` threads with
  one torch thread each (and one CUDA stream each on a GPU), each with its own model copy, flat buffers and SGD
  optimizer; job k goes to worker k mod W, each worker sums its weighted deltas, the workers' sums are added in
  worker order.
- ``lightfed``: lightfed with its defaults (on a CPU: one client worker per core of the process).
- ``lightfed-parallel``: lightfed with ``clients_in_parallel = --workers`` (a CPU only: a GPU refuses more than 1).
- ``lightfed-sequential``: lightfed with ``clients_in_parallel = 1`` (one client at a time on the intra-op threads).
- ``lightfed-vectorized``: lightfed with ``clients_in_parallel = vectorized`` (a process's clients as one batched
  computation under ``vmap``); not in the default ``--paths``.

Each measured run is a fresh subprocess of this script (``--only <path>``) that prints a ``BENCH_RESULT {json}`` line
per process; the top-level invocation runs them ``--repeats`` times, alternating the order, and prints the median
seconds per round of each path, its ratio to the concurrent and to the sequential loop, peak memory and the largest
difference between each path's final global weights and the sequential loop's (all use the same seeds, client
sampling, data order and initial weights, so the weights agree to float rounding).

Each path trains ``--warmup-rounds + --rounds`` rounds; the warm-up rounds are not timed (the first round's period
holds one-time costs; lightfed creates its TensorBoard writer when it first hands it the rounds' events, a second into
the run, which for rounds of a second or more is in the second round's period). A round's time is
the wall time from the end of one round's aggregation to the end of the next one's, so for lightfed it includes
everything the trainer does per round (sampling, training, the all-reduce, aggregation, logging to TensorBoard);
lightfed's end of a round is taken by a callback's ``on_round_end``, which the trainer calls once per round after
aggregating (and evaluating, which only the last round does). The trainer's own ``round/time_s`` (which leaves out
logging) is reported as well, as that callback sees it. Every path evaluates the final global model on the test set
after the last round (not timed), so peak memory (``ru_maxrss`` per process; ``torch.cuda.max_memory_allocated`` on
GPUs) compares like with like.

Other work on the machine only ever adds time, and with several OpenMP threads per process it can add a lot (a
parallel op waits for its slowest thread): the fastest round of each path, the CPU time per round and the 1-minute
load average are reported too, and ``--threads 1`` is the least sensitive setting on a shared machine.

    python scripts/benchmarks/benchmark.py                          # defaults: 500 clients, 50 per round, 3 repeats
    python scripts/benchmarks/benchmark.py --widths 32 120          # also a model 10x larger (301k parameters, not 30k)
    python scripts/benchmarks/benchmark.py --workers 2 --threads 1  # 2 clients at once in concurrent, lightfed-parallel
    python scripts/benchmarks/benchmark.py --devices 2              # 2 processes per path (1 thread each on 2 cores)
    python scripts/benchmarks/benchmark.py --compare-devices 1 2    # both, and the speed-up of 2 over 1
    python scripts/benchmarks/benchmark.py --device cuda            # on a GPU (adds torch.cuda.max_memory_allocated)
    python scripts/benchmarks/benchmark.py --profile prof/          # plus one cProfile'd run per path
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from functools import partial
from pathlib import Path

from lightfed.experiments.measurement import emit, peak_rss_mb, set_threads
from lightfed.experiments.synthetic_cifar import SyntheticCIFAR
from lightfed.run.cores import available_cores

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

PATHS = ("reference", "concurrent", "lightfed", "lightfed-parallel", "lightfed-sequential", "lightfed-vectorized")
DEFAULT_PATHS = PATHS[:-1]
LIGHTFED = ("lightfed", "lightfed-parallel", "lightfed-sequential")
SIZES = ("clients", "clients_per_round", "examples_per_client", "test_size", "local_epochs", "batch_size")


# ----------------------------------------------------------------------------------------------------------- options


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--clients", type=int, default=500, help="total number of clients")
    p.add_argument("--clients-per-round", type=int, default=50)
    p.add_argument("--examples-per-client", type=int, default=50)
    p.add_argument("--test-size", type=int, default=1000, help="central test images, evaluated after the last round")
    p.add_argument("--eval-batch-size", type=int, default=512)
    p.add_argument("--rounds", type=int, default=5, help="timed rounds")
    p.add_argument("--warmup-rounds", type=int, default=2, help="rounds trained first and not timed")
    p.add_argument("--repeats", type=int, default=3, help="fresh runs of each path; the median is reported")
    p.add_argument("--local-epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--width", type=int, default=32, help="SmallCNN width (smaller: less compute, overhead shows more)")
    p.add_argument(
        "--widths",
        type=int,
        nargs="+",
        metavar="W",
        help="run with each of these --width, e.g. 32 120 (29,642 and 301,210 parameters: 10x)",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--devices", type=int, default=1, help="processes per path")
    p.add_argument("--compare-devices", type=int, nargs="+", metavar="N", help="run with each of these --devices")
    p.add_argument("--threads", type=int, default=None, help="torch threads per process (default: cores / processes)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="clients at once per process of the concurrent and lightfed-parallel paths (default: cores / processes)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--paths", nargs="+", choices=PATHS, default=None, help="which paths to run (default: all but the vectorized)"
    )
    harness.add_json_option(p)
    p.add_argument("--profile", type=Path, default=None, help="folder: one extra cProfile'd run per path")
    p.add_argument("--keep", type=Path, default=None, help="folder to keep the runs' files in (default: a temp dir)")
    # internal: one measured run in this process
    p.add_argument("--only", choices=PATHS, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--profile-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    harness.require_at_least(p, args, 1, *SIZES, "rounds", "repeats", "eval_batch_size", "width", "devices", "workers")
    harness.require_at_least(p, args, 0, "warmup_rounds")
    if args.clients_per_round > args.clients:
        p.error("--clients-per-round must be <= --clients")
    if args.device == "cuda" and "lightfed-parallel" in (args.paths or ()):
        p.error("lightfed-parallel trains clients on CPU threads: leave it out of --paths with --device cuda")
    if args.paths is None:  # lightfed-parallel only on a CPU
        args.paths = [path for path in DEFAULT_PATHS if args.device == "cpu" or path != "lightfed-parallel"]
    if args.widths is not None and min(args.widths) < 1:
        p.error("--widths must be >= 1")
    return args


def total_rounds(args: argparse.Namespace) -> int:
    return args.warmup_rounds + args.rounds


def timed(values: list[float], args: argparse.Namespace) -> list[float]:
    """The per-round values of the timed rounds: all but the warm-up rounds."""
    return values[args.warmup_rounds :]


def peak_memory(device, baseline_mb: float) -> dict:
    import torch

    result = {"peak_rss_mb": peak_rss_mb(), "baseline_rss_mb": baseline_mb}
    if device.type == "cuda":
        result["cuda_peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return result


# ----------------------------------------------------------------------------------------------------------- workload


def make_source(args: argparse.Namespace) -> SyntheticCIFAR:
    """The synthetic CIFAR-shaped dataset of ``--clients`` x ``--examples-per-client`` images (both paths share it)."""
    return SyntheticCIFAR(args.clients * args.examples_per_client, args.test_size)


def make_model(args: argparse.Namespace):
    """SmallCNN with weights fixed by the seed: both paths start from the same ones."""
    import torch

    from lightfed.models import SmallCNN

    torch.manual_seed(args.seed)
    return SmallCNN(num_classes=10, in_channels=3, width=args.width, optimizer=partial(torch.optim.SGD, lr=args.lr))


def save_weights(vector, path: Path) -> str:
    import numpy as np

    np.save(path, vector.detach().cpu().numpy())
    return str(path)


def workers(args: argparse.Namespace) -> int:
    """Clients at once per process of the concurrent and lightfed-parallel paths."""
    return args.workers or max(1, available_cores() // args.devices)


def threads_per_process(args: argparse.Namespace) -> int:
    """Torch threads per process."""
    return args.threads or max(1, available_cores() // args.devices)


# ----------------------------------------------------------------------------------------------------------- lightfed


def run_lightfed(args: argparse.Namespace) -> None:
    """One lightfed run through the Python API; every process prints its result line, rank 0 saves the weights."""
    set_threads(threads_per_process(args))
    import torch

    from lightfed import FedAvg, FederatedDataModule, FederatedTrainer
    from lightfed.data import IIDPartitioner

    baseline_mb = peak_rss_mb()
    rounds = total_rounds(args)
    model = make_model(args)
    data = FederatedDataModule(
        make_source(args),
        IIDPartitioner(args.clients),
        batch_size=args.batch_size,
        eval_batch_size=args.eval_batch_size,
        val_fraction=0.0,
    )  # the reference's clients: all examples
    clock = harness.RoundClock()  # the end of each round, and the trainer's own ``round/time_s``
    options = {
        "lightfed": {},
        "lightfed-parallel": {"clients_in_parallel": workers(args)},
        "lightfed-sequential": {"clients_in_parallel": 1},
        "lightfed-vectorized": {"clients_in_parallel": "vectorized"},
    }[args.only]  # lightfed: its default
    trainer = FederatedTrainer.from_settings(
        accelerator=args.device,
        devices=args.devices,
        **options,
        rounds=rounds,
        clients_per_round=args.clients_per_round,
        local_epochs=args.local_epochs,
        eval_interval=rounds,  # only the last round evaluates (after its end is noted)
        checkpoint_interval=rounds,  # only the last round writes last.ckpt
        seed=args.seed,
        root_dir=str(args.out / "runs"),
        name="lightfed",
        progress_bar=False,
        callbacks=[clock],
    )
    profiler = None
    if args.profile_out is not None:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    clock.start()
    metrics = trainer.fit(model, data, FedAvg())
    fit_s = clock.now()[0] - clock.began[0]
    if profiler is not None:
        profiler.disable()
    fabric = trainer.fabric
    result = {
        "path": args.only,
        "rank": fabric.global_rank,
        "world": fabric.world_size,
        "threads": trainer.workers.threads if trainer.workers.lanes > 1 else torch.get_num_threads(),
        "workers": trainer.workers.lanes,
        "params": sum(p.numel() for p in model.parameters()),
        **peak_memory(fabric.device, baseline_mb),
    }
    if fabric.is_global_zero:
        if profiler is not None:
            profiler.dump_stats(args.profile_out)
        # the set-up inside fit() (data, Fabric) comes before round 0: its period is the warm-up's and not timed
        periods = clock.periods()
        result.update(
            round_times=timed(periods.wall, args),
            cpu_round_times=timed(periods.cpu, args),
            trainer_round_times=timed([m["round/time_s"] for m in clock.metrics], args)[:-1],  # [-1]: evaluates too
            fit_s=fit_s,
            final_train_loss=metrics.get("round/client_train_loss"),
            val_acc=trainer.final_report.get("test_acc"),  # the test set, as the reference's val_acc
            weights=save_weights(
                torch.nn.utils.parameters_to_vector(model.parameters()), args.out / f"{args.only}.npy"
            ),
        )
    emit(result)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


# ----------------------------------------------------------------------------------------------------------- reference


def run_reference(args: argparse.Namespace) -> None:
    """The plain-PyTorch loop; with ``--devices N`` rank 0 runs here and ranks 1.. in spawned processes."""
    import socket

    port = 0
    if args.devices > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    children = []
    if args.devices > 1:
        import torch.multiprocessing as mp

        context = mp.get_context("spawn")
        for rank in range(1, args.devices):
            child = context.Process(target=reference_rank, args=(args, rank, port))
            child.start()
            children.append(child)
    try:
        reference_rank(args, 0, port)
    finally:
        for child in children:
            child.join()
    if any(child.exitcode != 0 for child in children):
        raise SystemExit(f"a reference process failed: exit codes {[c.exitcode for c in children]}")


def reference_rank(args: argparse.Namespace, rank: int, port: int) -> None:
    """One process of a reference loop: what a careful hand-written FedAvg simulation does, and nothing more. The
    ``reference`` path trains one client after another; ``concurrent`` trains them on ``workers`` threads at once."""
    set_threads(threads_per_process(args))
    from concurrent.futures import ThreadPoolExecutor

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from lightfed.core.seeding import derived_seed, sample_clients
    from lightfed.data import IIDPartitioner
    from lightfed.streams import Stream

    baseline_mb = peak_rss_mb()
    world = args.devices
    if args.device == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world > 1:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)

    # data: all examples in memory, each client an index tensor (the partition lightfed makes from the same seed)
    splits = make_source(args).load(args.seed)
    partition = IIDPartitioner(args.clients).partition(splits.train_y.numpy(), args.seed)
    train_x, train_y = splits.train_x.to(device), splits.train_y.to(device)
    test_x, test_y = splits.test_x.to(device), splits.test_y.to(device)
    client_indices = [torch.as_tensor(i, dtype=torch.long, device=device) for i in partition]
    del splits

    class Replica:
        """One model whose parameters and gradients are views of one flat vector each (loading weights is one copy,
        zeroing the gradient one zero_, the SGD step one op on the vector), a delta buffer and the float64 sums of its
        clients: weighted deltas, weight, loss; a CUDA stream of its own when workers share a GPU."""

        def __init__(self) -> None:
            self.net = make_model(args).net.to(device)
            params = list(self.net.parameters())
            self.flat = torch.cat([p.detach().reshape(-1) for p in params])
            self.flat.grad = torch.zeros_like(self.flat)
            offset = 0
            for p in params:
                p.data = self.flat[offset : offset + p.numel()].view_as(p)
                p.grad = self.flat.grad[offset : offset + p.numel()].view_as(p)  # backward accumulates into it
                offset += p.numel()
            self.delta = torch.empty_like(self.flat)
            self.sums = torch.zeros(self.flat.numel() + 2, dtype=torch.float64, device=device)
            self.optimizer = torch.optim.SGD([self.flat], lr=args.lr)
            self.stream = torch.cuda.Stream(device) if device.type == "cuda" and concurrent else None

        def train(self, round: int, client_id: int) -> None:
            self.flat.copy_(global_weights)
            generator = torch.Generator().manual_seed(derived_seed(args.seed, Stream.CLIENT, round, client_id))
            indices = client_indices[client_id]
            loss_sum, steps = torch.zeros((), device=device), 0
            for _ in range(args.local_epochs):
                order = indices[torch.randperm(len(indices), generator=generator).to(device)]
                for start in range(0, len(order), args.batch_size):
                    batch = order[start : start + args.batch_size]
                    loss = F.cross_entropy(self.net(train_x[batch]), train_y[batch])
                    self.flat.grad.zero_()
                    loss.backward()
                    self.optimizer.step()
                    loss_sum += loss.detach()
                    steps += 1
            num_examples = len(indices)
            torch.sub(self.flat, global_weights, out=self.delta)
            self.sums[:num_params].add_(self.delta, alpha=num_examples)
            self.sums[num_params] += num_examples
            self.sums[num_params + 1] += loss_sum / steps

        def train_all(self, round: int, client_ids: list[int], current) -> None:
            """A worker's clients of the round (on its own CUDA stream, after the caller's ``current`` one)."""
            if self.stream is not None:
                self.stream.wait_stream(current)
            with torch.cuda.stream(self.stream):  # None: no-op
                for client_id in client_ids:
                    self.train(round, client_id)

    concurrent = args.only == "concurrent"
    # as lightfed: at most one worker per client of the process; each worker thread runs torch ops on one thread
    count = min(workers(args), math.ceil(args.clients_per_round / world)) if concurrent else 1
    replicas = [Replica() for _ in range(count)]
    pool = ThreadPoolExecutor(count, initializer=torch.set_num_threads, initargs=(1,)) if concurrent else None
    global_weights = replicas[0].flat.clone()

    def train_share(round: int, mine: list[int], current, worker: int) -> None:
        """Worker ``worker``'s share of the round's clients: jobs worker, worker + count, ..."""
        replicas[worker].train_all(round, mine[worker::count], current)

    num_params = global_weights.numel()
    sums = replicas[0].sums

    profiler = None
    if args.profile_out is not None and rank == 0:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    clock = harness.RoundClock()  # the loop notes the end of its rounds as lightfed's callback does
    clock.start()
    losses = []
    for round in range(total_rounds(args)):
        mine = sample_clients(args.seed, round, args.clients, args.clients_per_round)[rank::world]
        if pool is None:
            for client_id in mine:
                replicas[0].train(round, client_id)
        else:  # job k to worker k mod W, the workers' sums added in worker order
            current = torch.cuda.current_stream(device) if device.type == "cuda" else None
            list(pool.map(partial(train_share, round, mine, current), range(count)))
            for replica in replicas:
                if replica.stream is not None:
                    current.wait_stream(replica.stream)
            for replica in replicas[1:]:
                sums.add_(replica.sums)
                replica.sums.zero_()
        if world > 1:
            dist.all_reduce(sums)
        global_weights.add_((sums[:num_params] / sums[num_params]).to(global_weights.dtype))  # FedAvg, server lr 1
        losses.append(sums[num_params + 1].item() / args.clients_per_round)  # waits for the device
        sums.zero_()
        clock.on_round_end(None, round, {})

    # the final global model on this process's share of the test set, as lightfed's last round does
    if pool is not None:
        pool.shutdown()
    net = replicas[0].net
    replicas[0].flat.copy_(global_weights)
    net.eval()
    bounds = [len(test_y) * r // world for r in range(world + 1)]
    correct = torch.zeros((), dtype=torch.float64, device=device)
    with torch.no_grad():
        for start in range(bounds[rank], bounds[rank + 1], args.eval_batch_size):
            end = min(start + args.eval_batch_size, bounds[rank + 1])
            correct += (net(test_x[start:end]).argmax(1) == test_y[start:end]).sum()
    if world > 1:
        dist.all_reduce(correct)
    fit_s = clock.now()[0] - clock.began[0]
    if profiler is not None:
        profiler.disable()
    result = {
        "path": args.only,
        "rank": rank,
        "world": world,
        "threads": 1 if concurrent else torch.get_num_threads(),
        "workers": len(replicas),
        "params": num_params,
        **peak_memory(device, baseline_mb),
    }
    if rank == 0:
        if profiler is not None:
            profiler.dump_stats(args.profile_out)
        periods = clock.periods()
        result.update(
            round_times=timed(periods.wall, args),
            cpu_round_times=timed(periods.cpu, args),
            fit_s=fit_s,
            final_train_loss=losses[-1],
            val_acc=correct.item() / len(test_y),
            weights=save_weights(global_weights, args.out / f"{args.only}.npy"),
        )
    emit(result)
    if world > 1:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------------------- driver


def run_worker(
    args: argparse.Namespace, path: str, devices: int, out: Path, profile_out: Path | None = None
) -> list[dict]:
    """Runs one path in a fresh subprocess of this script; returns the result line of each of its processes."""
    command = [sys.executable, os.path.abspath(__file__), "--only", path, "--out", str(out), "--devices", str(devices)]
    names = (*SIZES, "rounds", "warmup_rounds", "eval_batch_size", "lr", "width", "device", "seed", "workers")
    command += harness.option_words(args, names)
    threads = args.threads or max(1, available_cores() // devices)
    command += ["--threads", str(threads)]
    if profile_out is not None:
        command += ["--profile-out", str(profile_out)]
    load_before = os.getloadavg()[0]
    results = harness.run_processes(command, threads, devices, out, PYTHONUNBUFFERED="1")
    for result in results:  # 1-minute load averages: other work on the machine makes the timings noisy
        result["load_avg"] = [load_before, os.getloadavg()[0]]
    return results


def max_abs_diff(a: str, b: str) -> float:
    import numpy as np

    x, y = np.load(a), np.load(b)
    if x.shape != y.shape:
        raise RuntimeError(f"weight vectors differ in shape: {x.shape} vs {y.shape}")
    return float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max())


def summarize(runs: list[list[dict]]) -> dict:
    """Median over repeats of each run's median round time, and the peak memory."""
    per_run = [harness.median(run[0]["round_times"]) for run in runs]
    cpu_per_run = [harness.median(run[0]["cpu_round_times"]) for run in runs]
    summary = {
        "s_per_round": harness.median(per_run),
        "s_per_round_runs": per_run,
        "best_s_per_round": min(t for run in runs for t in run[0]["round_times"]),  # least disturbed by other work
        "cpu_s_per_round": harness.median(cpu_per_run),
        "cpu_s_per_round_runs": cpu_per_run,
        "round_times_runs": [run[0]["round_times"] for run in runs],
        "fit_s_runs": [run[0]["fit_s"] for run in runs],
        "peak_rss_mb_per_process": max(r["peak_rss_mb"] for run in runs for r in run),
        "peak_rss_mb_all_processes": max(sum(r["peak_rss_mb"] for r in run) for run in runs),
        "baseline_rss_mb_per_process": max(r["baseline_rss_mb"] for run in runs for r in run),
        "threads": runs[0][0]["threads"],
        "workers": runs[0][0]["workers"],
        "max_load_avg": max(max(run[0]["load_avg"]) for run in runs),
        "final_train_loss": runs[0][0]["final_train_loss"],
        "val_acc": runs[0][0]["val_acc"],
    }
    if runs[0][0].get("trainer_round_times"):
        summary["trainer_time_s"] = harness.median(harness.median(run[0]["trainer_round_times"]) for run in runs)
    if "cuda_peak_mb" in runs[0][0]:
        summary["cuda_peak_mb"] = max(r["cuda_peak_mb"] for run in runs for r in run)
    return summary


def path_ratios(config: dict, path: str, base: str) -> dict:
    """``path``'s time over ``base``'s: of the medians, of each repeat's, of the CPU times and of the fastest rounds."""
    ours, theirs = config[path], config[base]
    return {
        "ratio": ours["s_per_round"] / theirs["s_per_round"],
        "ratio_runs": harness.paired_ratios(ours["s_per_round_runs"], theirs["s_per_round_runs"]),
        "cpu_ratio": ours["cpu_s_per_round"] / theirs["cpu_s_per_round"],
        "best_ratio": ours["best_s_per_round"] / theirs["best_s_per_round"],
    }


def benchmark(args: argparse.Namespace, root: Path, argv: list[str]) -> dict:
    workload = ("clients", "clients_per_round", "examples_per_client", "rounds", "warmup_rounds", "repeats")
    workload += ("local_epochs", "batch_size", "lr", "device", "seed", "threads", "workers")
    report = {
        "workload": {k: getattr(args, k) for k in workload},
        "command": harness.command_line(__file__, argv),
        "configs": [],
    }
    device_counts = args.compare_devices or [args.devices]
    for width in args.widths or [args.width]:
        width_args = argparse.Namespace(**{**vars(args), "width": width})
        for devices in device_counts:
            name = f"width{width}-devices{devices}"
            runs: dict[str, list[list[dict]]] = {path: [] for path in args.paths}
            for repeat, path in harness.interleave(args.paths, args.repeats, alternate=True):
                runs[path].append(run_worker(width_args, path, devices, root / name / f"{path}{repeat}"))
                print(
                    f"  width={width} devices={devices} repeat {repeat + 1}/{args.repeats} {path:19s} "
                    f"{harness.median(runs[path][-1][0]['round_times']):.4f} s/round",
                    flush=True,
                )
            first = args.paths[0]
            config = {
                "width": width,
                "params": runs[first][0][0]["params"],
                "devices": devices,
                **{path: summarize(runs[path]) for path in args.paths},
                "weights_vs": first,
            }
            for base in ("concurrent", "reference"):  # every other path's ratios to this loop
                for path in args.paths if base in args.paths else ():
                    if path != base:
                        config.setdefault("ratios", {})[f"{path}/{base}"] = path_ratios(config, path, base)
            for path in args.paths[1:]:  # the final weights of every path against the first one's
                config.setdefault("max_abs_weight_diff", {})[f"{path}-{first}"] = max(
                    max_abs_diff(a[0]["weights"], b[0]["weights"])
                    for a, b in zip(runs[path], runs[first], strict=False)
                )
            if args.profile is not None:
                args.profile.mkdir(parents=True, exist_ok=True)
                for path in args.paths:
                    profile = args.profile / f"{path}-{name}.prof"
                    run_worker(width_args, path, devices, root / name / f"{path}-profile", profile)
                    config.setdefault("profiles", {})[path] = str(profile)
            report["configs"].append(config)
    for i in range(0, len(report["configs"]), len(device_counts)):  # per width: each --devices against the first
        base, *others = report["configs"][i : i + len(device_counts)]
        for c in others:
            report.setdefault("speedup", {})[f"width{c['width']}_devices{c['devices']}_vs_{base['devices']}"] = {
                path: base[path]["s_per_round"] / c[path]["s_per_round"] for path in args.paths
            }
    return report


def print_report(report: dict) -> None:
    w = report["workload"]
    print(
        f"\nworkload: {w['clients']} clients x {w['examples_per_client']} images (3x32x32), {w['clients_per_round']} "
        f"per round, {w['local_epochs']} local epoch(s), batch {w['batch_size']}, SGD lr {w['lr']}, FedAvg, "
        f"SmallCNN, device {w['device']}; median over {w['repeats']} runs of the median of {w['rounds']} timed "
        f"rounds (after {w['warmup_rounds']} warm-up rounds)"
    )
    for config in report["configs"]:
        paths = [path for path in PATHS if path in config]
        bases = [base for base in ("concurrent", "reference") if base in config]
        ratios, first = config.get("ratios", {}), config["weights_vs"]
        print(f"\nSmallCNN(width={config['width']}): {config['params']:,} parameters, devices={config['devices']}\n")
        header = ["path", "s/round", *(f"/ {base}" for base in bases), "s/round per repeat", "fastest"]
        rows = []
        for path in paths:
            s = config[path]
            cells = [f"{ratios[f'{path}/{base}']['ratio'] if path != base else 1:.3f}x" for base in bases]
            runs = ", ".join(f"{t:.4f}" for t in s["s_per_round_runs"])
            rows.append([path, f"{s['s_per_round']:.4f}", *cells, runs, f"{s['best_s_per_round']:.4f}"])
            rows[-1] += [f"{s['cpu_s_per_round']:.4f}", f"{s['workers']} x {s['threads']}"]
        harness.print_table([*header, "CPU s/round", "workers x threads"], rows, "lr" + "r" * len(bases) + "lrrl")
        cuda = any("cuda_peak_mb" in config[path] for path in paths)
        header = ["path", "peak RSS MiB/process (all; after imports)", "train loss", "test acc", f"max |w - {first}|"]
        rows = []
        for path in paths:
            s = config[path]
            rss = (
                f"{s['peak_rss_mb_per_process']:.0f} ({s['peak_rss_mb_all_processes']:.0f}; "
                f"{s['baseline_rss_mb_per_process']:.0f})"
            )
            diff = config.get("max_abs_weight_diff", {}).get(f"{path}-{first}")
            rows.append([path, rss, f"{s['final_train_loss']:.6f}", f"{s['val_acc']:.4f}", harness.cell(diff, ".3g")])
            rows[-1] += [harness.cell(s.get("cuda_peak_mb"), ".0f")] if cuda else []
        print()
        harness.print_table([*header, *(["CUDA peak MiB"] if cuda else [])], rows, "lrrrr" + "r" * cuda)
        for path in LIGHTFED:
            if "trainer_time_s" in config.get(path, {}):
                print(f"  {path}'s own round/time_s (leaves out logging): {config[path]['trainer_time_s']:.4f} s")
        for path, profile in config.get("profiles", {}).items():
            print(f"  profile of {path}: {profile}")
    cores = available_cores()
    busiest = max(c[p]["max_load_avg"] for c in report["configs"] for p in PATHS if p in c)
    if busiest > 1.5 * cores:
        print(
            f"\nnote: the machine's load average reached {busiest:.1f} on {cores} cores during the runs: other work "
            "was running and the timings are noisy (--threads 1 suffers least from it)"
        )
    for name, speedups in report.get("speedup", {}).items():
        print(f"\nspeed-up {name}: " + ", ".join(f"{path} {x:.2f}x" for path, x in speedups.items()))


def main(argv: list[str] | None = None) -> dict | None:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.only is not None:
        (run_lightfed if args.only in LIGHTFED else run_reference)(args)
        return None
    with harness.work_folder(args.keep, "lightfed-bench-") as root:
        report = benchmark(args, root, argv)
    print_report(report)
    harness.write_json(args.json, report)
    return report


if __name__ == "__main__":
    main()
