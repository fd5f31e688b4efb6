"""Whole-round wall time of FedECADO and Adaptive FedECADO against FedAvg, split into client and server time.

Every strategy runs the real trainer (``lightfed.FederatedTrainer``) on the same run settings, seed, data and client
sampling; only the strategy differs. Workloads:

- ``digits``: the embedded default, as in ``configs/digits/base.yaml``: SmallCNN, 20 clients with Dirichlet(0.3) label
  skew, 10 per round, 2 local epochs of SGD (lr 0.05), batch 16;
- ``vgg11``: ``lightfed.models.VGG11`` as in ``configs/cifar10/fedecado.yaml`` (batch 32, lr 5.5e-4, the mean of that
  config's client lr range), on CIFAR-shaped synthetic data (3x32x32, 10 classes, made in memory from the seed by
  ``lightfed.experiments.synthetic_cifar``; no download), 100 IID clients of 500 images (CIFAR-10's 50,000 split 100
  ways), 10 per round, 1 local epoch;
- ``resnet18gn``: ``lightfed.models.ResNet18GN`` as in ``configs/cifar10/base.yaml`` (batch 50, lr 0.01), same data.

Strategy settings come from the configs: FedECADO's ``tolerance`` from ``configs/<digits|cifar10>/fedecado.yaml``,
where a config keeps the paper's constants (``inductance_rule: constant``, cifar10) its ``sensitivity_step`` is the
client lr and its ``inductance`` the rule of thumb L = active clients x (window)^2 with T = local epochs x lr; digits
runs the defaults (critical inductance, window sensitivities); ``--inductance`` overrides L; AdaptiveFedECADO's ``tolerance`` from ``configs/<...>/adaptive_fedecado.yaml``
(its other settings are derived by the strategy itself; ``AdaptiveFedECADO-retro`` is the same with
``client_lte: retrospective``, one gradient a client step). FedAvg is plain FedAvg whose ``aggregate`` is timed the way
FedECADO times its own (``strategy/server_seconds``).

Each (workload, devices, strategy) is a fresh subprocess of this script (``--worker``) whose processes each print a
``BENCH_RESULT {json}`` line. It trains ``--warmup-rounds + --rounds`` rounds and stops through
``trainer.should_stop``, so the trainer never evaluates (no round is its last) and checkpoints only after the last
timed round (unless ``--checkpoint-interval``); no TensorBoard logger, no progress bar. Per timed round (the warm-up rounds are left out; a callback
notes the times):

- run s: the whole run, from the start of fitting to the end of the last round, warm-up rounds included (with
  ``--warmup-rounds 0`` every client's first participation, and so its curvature estimate, is in it), and run/FedAvg
  its multiple of FedAvg's; the whole-run cost a user pays; cpu s: the CPU time the run's processes spent in those
  rounds (user + system, ``time.process_time``, summed over processes) and cpu/FedAvg its multiple: on a shared
  machine, where other jobs stretch the wall time of whichever run they overlap, the steadier comparison (with one
  thread a process, ``--threads 1``, no thread spins waiting for another);
- round s: wall time from the end of one round (``on_round_end``) to the end of the next, as
  ``scripts/benchmarks/benchmark.py`` measures it (everything the trainer does per round);
- client s: from ``on_round_start`` to the last ``on_client_end`` of the round (configuring, training and
  accumulating the round's clients; with several processes the slowest process's);
- server s: the strategy's ``aggregate`` (``strategy/server_seconds``), on process 0;
- other s: round s - client s - server s (the reduction, metrics, the metrics file, ...);
- each column the median over the timed rounds (so the columns need not add up), and the round and server times as
  multiples of FedAvg's on the same settings; curv.est is the mean number of clients per timed round that estimated
  their curvature (a FedECADO client does the first time it is sampled: extra client time in the early rounds).

Under the table, where each strategy's extra time goes: a run splits into its start (from the start of fitting to the
end of the first timed round: setup, warm-up rounds, and with ``--warmup-rounds 0`` the first round, where every
client is new) and, summed over the later rounds, the client phase, the server step and the rest; each part's excess
over FedAvg's, divided by FedAvg's run, in every repeat (the four add up to run/FedAvg - 1), and its median.

With ``--devices 1 2`` every workload runs on 1 and then 2 processes, and the table also gives the bytes of the
tensors each process holds in ``strategy.client_states`` at the end of the run (per-client state: FedECADO's
currents and curvatures; FedAvg holds none). A run that fails (out of memory, say) is
reported as failed with its error, and the script exits with status 1 after printing everything else.

``--checkpoint-interval 1`` checkpoints every round, as a run with the trainer's default does (the last one is left
out of the times): each checkpoint writes the per-client state (FedECADO's currents) set since the last one.

With ``--repeats N`` every strategy runs N times, in turn (FedAvg, FedECADO, ..., then again), and each column is
the median over the repeats, each ratio the median of the repeats' own ratios to FedAvg's run in the same repeat
(printed for every repeat under the table, with the middle half of the run ratios, their first to third quartile):
a run of a few seconds varies by a tenth or more from one start to the next on a shared machine.

All runs use the same number of torch/OpenMP threads per process (``--threads``, default cores / the largest
``--devices``); on a GPU (``--accelerator gpu``) the callback synchronises the device at each time it notes.

    python scripts/benchmarks/circuit_benchmark.py                        # all three workloads, 1 process
    python scripts/benchmarks/circuit_benchmark.py --workloads digits vgg11 --rounds 3 --clients 20 --examples 50
    python scripts/benchmarks/circuit_benchmark.py --workloads resnet18gn --accelerator gpu --devices 1 2
    python scripts/benchmarks/circuit_benchmark.py --workloads digits --clients 50 --warmup-rounds 0 --rounds 30 \
        --variant FedECADO-4x8=FedECADO,curvature_batches=4,curvature_probes=8,curvature_examples=null \
        --strategies FedAvg FedECADO FedECADO-4x8

``--variant NAME=BASE,KEY=VALUE,...`` adds a row: FedECADO or AdaptiveFedECADO with its config's settings and these
constructor arguments (e.g. another curvature estimate; ``null`` is None), named in ``--strategies``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import yaml

from lightfed.experiments.measurement import emit, peak_rss_mb, set_threads
from lightfed.experiments.synthetic_cifar import SyntheticCIFAR
from lightfed.run.cores import available_cores

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
STRATEGIES = ("FedAvg", "FedECADO", "AdaptiveFedECADO", "AdaptiveFedECADO-retro")
BASES = ("FedAvg", "FedECADO", "AdaptiveFedECADO")
OPTIONAL_COUNTS = ("clients", "local_epochs", "threads", "checkpoint_interval")  # None: the workload's or default


@dataclass(frozen=True)
class Workload:
    """One model and data set with its run settings (``settings_from``: the config they follow)."""

    model: str  # a class of lightfed.models
    clients: int
    examples: int | None  # images per client (CIFAR-shaped synthetic data); None: all of digits
    batch_size: int
    lr: float
    local_epochs: int
    config_folder: str  # configs/<folder>/fedecado.yaml and adaptive_fedecado.yaml give the strategy settings
    settings_from: str


WORKLOADS = {
    "digits": Workload("SmallCNN", 20, None, 16, 0.05, 2, "digits", "configs/digits/base.yaml"),
    "vgg11": Workload("VGG11", 100, 500, 32, 5.5e-4, 1, "cifar10", "configs/cifar10/fedecado.yaml"),
    "resnet18gn": Workload("ResNet18GN", 100, 500, 50, 0.01, 1, "cifar10", "configs/cifar10/base.yaml"),
}


# ----------------------------------------------------------------------------------------------------------- options


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workloads", nargs="+", choices=tuple(WORKLOADS), default=list(WORKLOADS))
    p.add_argument("--rounds", type=int, default=5, help="timed rounds")
    p.add_argument("--warmup-rounds", type=int, default=1, help="rounds trained first and not timed")
    p.add_argument("--devices", type=int, nargs="+", default=[1], help="processes; one table per number given")
    p.add_argument("--accelerator", default="auto", help="Fabric accelerator: cpu, gpu, auto, ...")
    p.add_argument("--clients", type=int, default=None, help="total clients (default: the workload's, 20 or 100)")
    p.add_argument("--clients-per-round", type=int, default=10)
    p.add_argument(
        "--examples",
        type=int,
        default=None,
        help="examples per client (default: CIFAR-shaped 500; digits: all 1437 training images); "
        "for digits it keeps clients x examples training images",
    )
    p.add_argument("--local-epochs", type=int, default=None, help="default: the workload's (digits 2, CIFAR 1)")
    p.add_argument(
        "--inductance",
        type=float,
        default=None,
        help="FedECADO's L (default: active clients x (local epochs x lr)^2, the configs' rule of thumb)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch/OpenMP threads per process, the same for every run (default: cores / max --devices)",
    )
    p.add_argument(
        "--strategies",
        nargs="+",
        default=list(STRATEGIES),
        help=f"which strategies to run, of {', '.join(STRATEGIES)} and the --variant names (FedAvg is "
        "always needed: the ratios are to it)",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=BASE[,KEY=VALUE...]",
        help="a further strategy row: BASE (FedECADO or AdaptiveFedECADO) with its config settings and "
        "these constructor arguments (YAML values), e.g. "
        "FedECADO-cheap=FedECADO,curvature_probes=1,curvature_examples=8; repeatable",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--checkpoint-interval",
        type=int,
        default=None,
        help="checkpoint every this many rounds, as a run does (default: only after the last timed round)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run every strategy this many times, in turn; the table gives medians (a ratio: of each "
        "repeat's own, to FedAvg's run in that repeat)",
    )
    harness.add_json_option(p)
    p.add_argument("--keep", type=Path, default=None, help="folder to keep the runs' files in (default: a temp dir)")
    # internal: one measured run (one workload, one number of processes, one strategy) in this process
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    harness.require_at_least(p, args, 1, "rounds", "clients_per_round", "repeats", *OPTIONAL_COUNTS)
    harness.require_at_least(p, args, 0, "warmup_rounds")
    if any(n < 1 for n in args.devices):
        p.error("--devices must be >= 1")
    if args.examples is not None and args.examples < 10:
        p.error("--examples must be >= 10 (digits' Dirichlet split gives every client at least 10)")
    if args.inductance is not None and not args.inductance > 0:
        p.error("--inductance must be > 0")
    if args.clients is not None and args.clients_per_round > args.clients:
        p.error("--clients-per-round must be <= --clients")
    if "FedAvg" not in args.strategies:
        p.error("--strategies must include FedAvg (the ratios are to it)")
    try:
        args.variants = dict(parse_variant(text) for text in args.variant)
    except ValueError as error:
        p.error(f"--variant: {error}")
    unknown = set(args.strategies) - set(STRATEGIES) - set(args.variants)
    if unknown:
        p.error(f"--strategies: unknown {', '.join(sorted(unknown))} (neither built in nor a --variant)")
    return args


def parse_variant(text: str) -> tuple[str, tuple[str, dict]]:
    """ "NAME=BASE,KEY=VALUE,..." -> (NAME, (BASE, {KEY: VALUE})), the values parsed as YAML."""
    name, _, spec = text.partition("=")
    base, *pairs = spec.split(",")
    if not name or base not in BASES[1:]:
        raise ValueError(f"expected NAME=FedECADO|AdaptiveFedECADO[,KEY=VALUE...], got {text!r}")
    if any("=" not in pair for pair in pairs):
        raise ValueError(f"expected KEY=VALUE pairs after the base, got {text!r}")
    return name, (base, {key: yaml.safe_load(value) for key, value in (pair.split("=", 1) for pair in pairs)})


def settings(args: argparse.Namespace, name: str) -> dict:
    """The run settings of workload ``name`` with the command's knobs applied."""
    w = WORKLOADS[name]
    clients = args.clients or w.clients
    return {
        "workload": name,
        "model": w.model,
        "clients": clients,
        "clients_per_round": min(args.clients_per_round, clients),
        "examples": args.examples or w.examples,
        "batch_size": w.batch_size,
        "lr": w.lr,
        "local_epochs": args.local_epochs or w.local_epochs,
        "settings_from": w.settings_from,
    }


def strategy_settings(args: argparse.Namespace, run: dict) -> dict[str, dict]:
    """Each strategy's constructor arguments: the configs' where they exist, the inductance by their rule of thumb."""
    folder = CONFIGS / WORKLOADS[run["workload"]].config_folder
    fedecado = dict(yaml.safe_load((folder / "fedecado.yaml").read_text())["strategy"]["init_args"])
    adaptive = dict(yaml.safe_load((folder / "adaptive_fedecado.yaml").read_text())["strategy"]["init_args"])
    window = run["local_epochs"] * run["lr"]
    if fedecado.get("inductance_rule") == "constant":  # the paper's constants (cifar10): L by the rule of thumb
        fedecado["inductance"] = args.inductance or run["clients_per_round"] * window**2
        fedecado["sensitivity_step"] = run["lr"]
    elif args.inductance:
        fedecado["inductance"] = args.inductance
    built_in = {
        "FedAvg": {},
        "FedECADO": fedecado,
        "AdaptiveFedECADO": adaptive,
        "AdaptiveFedECADO-retro": {**adaptive, "client_lte": "retrospective"},
    }
    variants = {name: {**built_in[base], **extra} for name, (base, extra) in args.variants.items()}
    return {**built_in, **variants}


def base_strategy(args: argparse.Namespace, name: str) -> str:
    """The class a row runs: FedAvg, FedECADO or AdaptiveFedECADO."""
    if name in args.variants:
        return args.variants[name][0]
    return "AdaptiveFedECADO" if name == "AdaptiveFedECADO-retro" else name


def threads_per_process(args: argparse.Namespace) -> int:
    return args.threads or max(1, available_cores() // max(args.devices))


# ----------------------------------------------------------------------------------------------------------- worker


def make_data(run: dict, seed: int):
    from lightfed import FederatedDataModule
    from lightfed.data import Digits, DirichletPartitioner, IIDPartitioner
    from lightfed.data.datasets import DatasetSource, TensorSplits

    if run["workload"] != "digits":
        source = SyntheticCIFAR(run["clients"] * run["examples"], 100)  # the test set is never evaluated
        return FederatedDataModule(source, IIDPartitioner(run["clients"]), batch_size=run["batch_size"])

    class FirstExamples(DatasetSource):
        """Digits with only the first ``n`` training images (of the seed's stratified split)."""

        def __init__(self, n: int) -> None:
            self.n = n

        def load(self, seed: int) -> TensorSplits:
            splits = Digits().load(seed)
            return replace(splits, train_x=splits.train_x[: self.n], train_y=splits.train_y[: self.n])

    source = Digits() if run["examples"] is None else FirstExamples(run["clients"] * run["examples"])
    return FederatedDataModule(source, DirichletPartitioner(run["clients"], alpha=0.3), batch_size=run["batch_size"])


def make_model(run: dict, seed: int):
    import torch

    from lightfed import models

    torch.manual_seed(seed)  # every strategy starts from the same weights
    cls = getattr(models, run["model"])
    sgd = partial(torch.optim.SGD, lr=run["lr"])
    return cls(num_classes=10, in_channels=1 if run["workload"] == "digits" else 3, optimizer=sgd)


def make_strategy(name: str, kwargs: dict):
    import torch

    from lightfed.strategies import AdaptiveFedECADO, FedAvg, FedECADO

    class TimedFedAvg(FedAvg):
        """FedAvg reporting the seconds of its ``aggregate`` as ``server_seconds``, as FedECADO does."""

        server_seconds = 0.0

        def aggregate(self, params, sums, round):
            began = time.perf_counter()
            new = super().aggregate(params, sums, round)
            if new.is_cuda:
                torch.cuda.synchronize(new.device)
            self.server_seconds = time.perf_counter() - began
            return new

        def metrics(self) -> dict[str, float]:
            return {**super().metrics(), "server_seconds": self.server_seconds}

    classes = {"FedAvg": TimedFedAvg, "FedECADO": FedECADO, "AdaptiveFedECADO": AdaptiveFedECADO}
    return classes[name](**kwargs)


def client_state_bytes(strategy) -> tuple[int, int]:
    """Bytes of the tensors this process holds in ``strategy.client_states``, and the number of clients they are for."""
    states = strategy.client_states.state_dict()
    return sum(t.numel() * t.element_size() for state in states.values() for t in state.values()), len(states)


def run_worker(args: argparse.Namespace) -> None:
    """One run of one strategy; every process prints its result line."""
    set_threads(threads_per_process(args))  # a worker has one --devices value
    import torch

    from lightfed import FederatedTrainer

    run = settings(args, args.workloads[0])
    total = args.warmup_rounds + args.rounds

    class RoundClock(harness.RoundClock):
        """Notes per round its start, its last client's end, its end and the strategy's server time (waiting for a
        GPU before each reading); stops the run after ``total`` rounds (before the trainer's last round, the one it
        would evaluate)."""

        def __init__(self) -> None:
            super().__init__(sync=True)
            self.last_client: list[float | None] = []
            self.curvature: list[int] = []
            self.state = (0, 0)

        def on_round_start(self, trainer, round: int) -> None:
            super().on_round_start(trainer, round)
            self.last_client.append(None)
            self.curvature.append(0)

        def on_client_end(self, trainer, update) -> None:
            self.last_client[-1] = self.now(trainer)[0]
            self.curvature[-1] += int("curvature" in update.report)

        def on_round_end(self, trainer, round: int, metrics: dict[str, float]) -> None:
            super().on_round_end(trainer, round, metrics)
            if trainer.round >= total:
                trainer.should_stop = True

        def on_fit_end(self, trainer, metrics: dict[str, float]) -> None:
            self.state = client_state_bytes(trainer.strategy)

    clock = RoundClock()
    model = make_model(run, args.seed)
    data = make_data(run, args.seed)
    strategy = make_strategy(base_strategy(args, args.worker), strategy_settings(args, run)[args.worker])
    trainer = FederatedTrainer.from_settings(
        accelerator=args.accelerator,
        devices=args.devices[0],
        rounds=total + 1,  # never reached: the clock stops the run after ``total`` rounds
        clients_per_round=run["clients_per_round"],
        local_epochs=run["local_epochs"],
        eval_interval=total + 1,
        checkpoint_interval=args.checkpoint_interval or total + 1,
        seed=args.seed,
        root_dir=str(args.out / "runs"),
        name=f"{run['workload']}-{args.worker}",
        progress_bar=False,
        logger=False,
        callbacks=[clock],
    )
    trainer.fit(model, data, strategy)
    fabric = trainer.fabric
    skip = args.warmup_rounds
    periods = clock.periods().wall
    server = [{k: float(v) for k, v in m.items() if k.startswith("strategy/server_")} for m in clock.metrics[skip:]]
    result = {
        "strategy": args.worker,
        "rank": fabric.global_rank,
        "world": fabric.world_size,
        "device": str(fabric.device),
        "threads": torch.get_num_threads(),
        "params": sum(p.numel() for p in model.parameters()),
        "rounds_done": trainer.round,
        "round_times": periods[skip:],
        "run_seconds": sum(periods),
        "run_cpu_seconds": clock.ends[-1][1] - clock.began[1],
        "client_times": [
            0.0 if end is None else end - start
            for (start, _), end in zip(clock.starts[skip:], clock.last_client[skip:], strict=False)
        ],
        "server_times": [m.get("strategy/server_seconds", math.nan) for m in server],
        "server_steps": [m.get("strategy/server_steps", math.nan) for m in server],
        "server_rejected": [m.get("strategy/server_rejected", math.nan) for m in server],
        "curvature_estimates": clock.curvature[skip:],
        "client_state_bytes": clock.state[0],
        "client_state_clients": clock.state[1],
        "peak_rss_mb": peak_rss_mb(),
    }
    emit(result)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


# ----------------------------------------------------------------------------------------------------------- driver


def launch(args: argparse.Namespace, workload: str, devices: int, strategy: str, out: Path) -> list[dict]:
    """Runs one strategy in a fresh subprocess of this script; returns each of its processes' result, by rank."""
    threads = threads_per_process(args)
    command = [sys.executable, os.path.abspath(__file__), "--worker", strategy, "--workloads", workload]
    command += ["--devices", str(devices), "--out", str(out), "--threads", str(threads)]
    command += harness.option_words(args, ("accelerator", "rounds", "warmup_rounds", "clients_per_round", "seed"))
    command += harness.option_words(args, ("clients", "examples", "local_epochs", "inductance", "checkpoint_interval"))
    for text in args.variant:
        command += ["--variant", text]
    return harness.run_processes(command, threads, devices, out)  # buffered: a result line in one write


def summarize(results: list[dict]) -> dict:
    """Medians over the timed rounds: the round and server time of process 0, the slowest process's client time."""
    first = results[0]
    slowest_clients = [max(r["client_times"][i] for r in results) for i in range(len(first["client_times"]))]
    s = {
        "round_s": harness.median(first["round_times"]),
        "run_s": first["run_seconds"],
        "cpu_s": sum(r["run_cpu_seconds"] for r in results),
        "client_s": harness.median(slowest_clients),
        "server_s": harness.median(first["server_times"]),
        "server_steps": harness.median(first["server_steps"]),
        "server_rejected": harness.median(first["server_rejected"]),
        "curvature_estimates_per_round": [
            sum(r["curvature_estimates"][i] for r in results) for i in range(len(first["curvature_estimates"]))
        ],
        "client_state_bytes": [r["client_state_bytes"] for r in results],
        "client_state_clients": [r["client_state_clients"] for r in results],
        "round_times": first["round_times"],
        "server_times": first["server_times"],
        "client_times": slowest_clients,
        "threads": first["threads"],
        "device": first["device"],
        "params": first["params"],
    }
    s["curvature_estimates"] = statistics.mean(s["curvature_estimates_per_round"])
    others = [r - c - v for r, c, v in zip(first["round_times"], slowest_clients, first["server_times"], strict=False)]
    s["other_s"] = harness.median(others)
    later = slice(1, None)  # the timed rounds after the first
    s["parts"] = {
        "start": s["run_s"] - math.fsum(first["round_times"][later]),
        "clients": math.fsum(slowest_clients[later]),
        "server": math.fsum(first["server_times"][later]),
        "other": math.fsum(others[later]),
    }
    return s


PARTS = ("start", "clients", "server", "other")  # of a run: to the end of the first timed round, then phases
RATIOS = {"round_ratio": "round_s", "run_ratio": "run_s", "cpu_ratio": "cpu_s", "server_ratio": "server_s"}


def run_all(args: argparse.Namespace, root: Path) -> dict:
    report = {
        "threads": threads_per_process(args),
        "rounds": args.rounds,
        "warmup_rounds": args.warmup_rounds,
        "repeats": args.repeats,
        "tables": [],
    }
    for workload in args.workloads:
        run = settings(args, workload)
        for devices in args.devices:
            table = {"devices": devices, "run": run, "strategy_settings": strategy_settings(args, run), "rows": {}}
            repeats: dict[str, list[dict]] = {name: [] for name in args.strategies}
            for repeat, strategy in harness.interleave(args.strategies, args.repeats):  # FedAvg, FedECADO, ... again
                print(f"  {workload} devices={devices} {strategy} (repeat {repeat + 1}/{args.repeats}) ...", flush=True)
                out = root / workload / f"devices{devices}" / strategy / f"repeat{repeat}"
                try:
                    repeats[strategy].append(summarize(launch(args, workload, devices, strategy, out)))
                except harness.RunFailed as failure:
                    repeats[strategy].append({"failed": str(failure)})
            table["rows"] = {name: combine(runs, repeats["FedAvg"]) for name, runs in repeats.items()}
            report["tables"].append(table)
            print_table(report, table)
    return report


def combine(runs: list[dict], baselines: list[dict]) -> dict:
    """One row from a strategy's repeats: the median of each time, and of each ratio to FedAvg's time in the same
    repeat (with the ratios of every repeat, ``<ratio>_each``, and their first and third quartiles,
    ``<ratio>_quartiles``; none when a FedAvg repeat failed); failed when any repeat failed."""
    failure = next((run["failed"] for run in runs if "failed" in run), None)
    if failure is not None:
        return {"failed": failure}
    row = {**runs[0], "repeats": runs}
    for key in ("round_s", "run_s", "cpu_s", "client_s", "server_s", "other_s", "curvature_estimates"):
        row[key] = harness.median([run[key] for run in runs])
    if not any("failed" in base for base in baselines):
        row["extra_each"] = [
            {part: (run["parts"][part] - base["parts"][part]) / base["run_s"] for part in PARTS}
            for run, base in zip(runs, baselines, strict=True)
        ]
        row["extra"] = {part: harness.median([each[part] for each in row["extra_each"]]) for part in PARTS}
        for ratio, key in RATIOS.items():
            each = harness.paired_ratios([run[key] for run in runs], [base[key] for base in baselines])
            row[f"{ratio}_each"], row[ratio] = each, harness.median(each)
            if len(each) > 1:  # the middle half of the repeats' ratios: how far one median may be off
                row[f"{ratio}_quartiles"] = harness.quartiles(each)
    return row


COLUMNS = ("run s", "run/FedAvg", "cpu s", "cpu/FedAvg", "round s", "client s", "server s", "other s")
COLUMNS += ("round/FedAvg", "server/FedAvg", "srv steps", "rejected", "curv.est", "client state bytes/process")
KEYS = ("run_s", "run_ratio", "cpu_s", "cpu_ratio", "round_s", "client_s", "server_s", "other_s", "round_ratio")
KEYS += ("server_ratio", "server_steps", "server_rejected", "curvature_estimates")


def print_table(report: dict, table: dict) -> None:
    run, rows = table["run"], table["rows"]
    ok = [row for row in rows.values() if "failed" not in row]
    device = ok[0]["device"] if ok else "?"
    params = f", {ok[0]['params']:,} parameters" if ok else ""
    data = (
        ("digits" if run["examples"] is None else f"{run['clients'] * run['examples']} digits images")
        if run["workload"] == "digits"
        else f"CIFAR-shaped synthetic, {run['examples']} images/client, IID"
    )
    print(
        f"\n{run['workload']} ({run['model']}{params}; {data}): {run['clients']} clients, "
        f"{run['clients_per_round']} per round, {run['local_epochs']} local epoch(s), batch {run['batch_size']}, "
        f"lr {run['lr']:g} (as {run['settings_from']})"
    )
    print(
        f"devices={table['devices']} ({device}), {report['threads']} thread(s)/process; run s: the whole run, "
        f"{report['warmup_rounds'] + report['rounds']} round(s) with every first participation; the other columns: "
        f"median over {report['rounds']} timed round(s) after {report['warmup_rounds']} warm-up round(s)"
    )
    st = table["strategy_settings"]
    fe, ad = st["FedECADO"], st["AdaptiveFedECADO"]
    print(
        "  FedECADO: "
        + ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in fe.items())
        + ";  AdaptiveFedECADO: "
        + ", ".join(f"{k} {v}" for k, v in ad.items())
    )
    for name in rows:
        if name not in STRATEGIES:
            print(f"  {name}: {st[name]}")
    print()
    harness.print_table(
        ["strategy", *COLUMNS],
        (
            [name, f"failed: {row['failed']}"]
            if "failed" in row
            else [name, *(harness.cell(row.get(key)) for key in KEYS), " / ".join(map(str, row["client_state_bytes"]))]
            for name, row in rows.items()
        ),
        "l" + "r" * len(COLUMNS),
    )
    print(
        "\nwhere the extra time goes (each part's excess over FedAvg's, a share of FedAvg's run, median over the "
        "repeats; start: to the end of the first timed round, then the later rounds' phases):\n"
    )
    extra = [[name, *(f"{row['extra'][part]:+.3f}" for part in PARTS)] for name, row in rows.items() if "extra" in row]
    harness.print_table(["strategy", *PARTS], extra, "l" + "r" * len(PARTS))
    if report["repeats"] > 1:
        print(
            f"\neach column: the median over {report['repeats']} repeats, a ratio over each repeat's own FedAvg run; "
            "run/FedAvg and cpu/FedAvg in every repeat, and the middle half of the repeats' run/FedAvg:\n"
        )
        each = [
            [
                name,
                ", ".join(
                    f"{r:.3g}/{c:.3g}" for r, c in zip(row["run_ratio_each"], row["cpu_ratio_each"], strict=False)
                ),
                "{:.3g}-{:.3g}".format(*row["run_ratio_quartiles"]),
            ]
            for name, row in rows.items()
            if "run_ratio_each" in row
        ]
        harness.print_table(["strategy", "run/FedAvg / cpu/FedAvg in each repeat", "middle half"], each)


def print_scaling(report: dict) -> None:
    """Seconds per round of each strategy on each number of processes, where there are several."""
    by_workload: dict[str, list[dict]] = {}
    for table in report["tables"]:
        by_workload.setdefault(table["run"]["workload"], []).append(table)
    for workload, tables in by_workload.items():
        if len(tables) < 2:
            continue
        print(f"\n{workload}: seconds per round by number of processes\n")
        harness.print_table(
            ["strategy", *(f"devices={t['devices']}" for t in tables)],
            ([name, *(harness.cell(t["rows"][name].get("round_s")) for t in tables)] for name in tables[0]["rows"]),
            "l" + "r" * len(tables),
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.worker is not None:
        run_worker(args)
        return 0
    print(harness.command_line(__file__, argv), flush=True)
    with harness.work_folder(args.keep, "lightfed-circuit-bench-") as root:
        report = run_all(args, root)
    print_scaling(report)
    harness.write_json(args.json, report)
    failed = [
        f"{t['run']['workload']} devices={t['devices']} {name}"
        for t in report["tables"]
        for name, row in t["rows"].items()
        if "failed" in row
    ]
    if failed:
        print(f"\nfailed runs: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
