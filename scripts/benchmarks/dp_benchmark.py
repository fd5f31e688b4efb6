"""DP-SGD round time, side by side in one run: lightfed without DP, lightfed with DP-SGD (each of Opacus' per-sample
modes) and hand-written Opacus loops that train the same clients.

The workload is the quickstart's (``configs/quickstart.yaml``): digits, SmallCNN, 20 clients with Dirichlet(0.5) label
skew, 10 per round, 2 local epochs, batch 16, SGD lr 0.1 momentum 0.9, example-weighted FedAvg; DP-SGD with noise
multiplier 1, clipping bound 1, Poisson batches (rate 1 / ceil(examples / 16)), one RDP accountant per client.

The paths (``--paths``):

- ``no-dp``: lightfed, FedAvg without privacy;
- ``dp-hooks``, ``dp-functorch``: lightfed with ``DPSGD(grad_sample_mode=...)``;
- ``opacus``: the best hand-written Opacus loop: ``make_private`` once (a ``GradSampleModule`` and a ``DPOptimizer``
  reused by every client), then per client: the global weights copied in, Poisson sampling by index (Opacus'
  ``UniformWithReplacementSampler``) and batches by indexing its tensors, its own ``RDPAccountant`` stepped every
  step, 2 passes, its delta added into the example-weighted sum;
- ``opacus-per-client``: the loop of Opacus' tutorials: ``make_private`` (and a clean-up) for every client of every
  round, with the ``DPDataLoader`` it returns.

The clients of each round are the trainer's (``lightfed.core.seeding.sample_clients``). Each path trains
``--rounds`` rounds, ``--repeats`` times (the paths alternate, in one process, one torch thread); a round's time runs
from the trainer's ``on_round_start`` to its ``on_round_end`` (training, the reduction, the aggregate; the last round,
which evaluates, is left out) or, for the loops, over a round; the first round of every run is left out too (one-time
set-up). The table gives the median wall and CPU seconds per round (CPU time, of the one thread, is what other jobs on
a shared machine disturb least) and each path's multiple of ``opacus``. lightfed logs every client's
epsilon after every round, from Renyi divergences it computes once per (noise, sample rate) and process (about a second
each); the script computes them for every client before timing and prints how long that took.

    python scripts/benchmarks/dp_benchmark.py                       # 5 rounds x 3 repeats, every path
    python scripts/benchmarks/dp_benchmark.py --rounds 4 --repeats 2 --paths no-dp dp-hooks opacus
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from lightfed import FederatedTrainer
from lightfed.core.seeding import sample_clients
from lightfed.data import Digits, DirichletPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.models import SmallCNN
from lightfed.privacy import DPSGD
from lightfed.privacy.accountant import _rdp_of_one_step, poisson_schedule
from lightfed.strategies import FedAvg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

CLIENTS, PER_ROUND, EPOCHS, BATCH, NOISE, CLIP, SEED = 20, 10, 2, 16, 1.0, 1.0, 0
PATHS = ["no-dp", "dp-hooks", "dp-functorch", "opacus", "opacus-per-client"]


def data() -> FederatedDataModule:
    return FederatedDataModule(
        Digits(test_fraction=0.2), DirichletPartitioner(CLIENTS, alpha=0.5), batch_size=BATCH, val_fraction=0.1
    )


def model() -> SmallCNN:
    torch.manual_seed(SEED)
    return SmallCNN(num_classes=10, in_channels=1, optimizer=partial(torch.optim.SGD, lr=0.1, momentum=0.9))


def lightfed_rounds(path: str, rounds: int) -> harness.Times:
    """Each round's seconds but the first and the last (which evaluates)."""
    privacy = None if path == "no-dp" else DPSGD(NOISE, CLIP, grad_sample_mode=path.removeprefix("dp-"))
    clock = harness.RoundClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = FederatedTrainer.from_settings(
            accelerator="cpu",
            rounds=rounds,
            clients_per_round=PER_ROUND,
            local_epochs=EPOCHS,
            seed=SEED,
            eval_interval=rounds + 1,
            checkpoint_interval=rounds + 1,
            root_dir=root,
            progress_bar=False,
            clients_in_parallel=1,
            privacy=privacy,
            callbacks=[clock],
            logger=False,
        )
        trainer.fit(model(), data(), FedAvg())
    return clock.rounds()[1:-1]


def opacus_rounds(path: str, rounds: int) -> harness.Times:
    """The hand-written loop (see the module's docstring); each round's seconds but the first."""
    from opacus import PrivacyEngine
    from opacus.accountants import RDPAccountant
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler
    from torch.utils.data import TensorDataset

    federated = data()
    federated.setup(seed=SEED, device=torch.device("cpu"))
    clients = [federated.client_subset(c, torch.arange(federated.client_size(c))) for c in range(CLIENTS)]
    net = model().net
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    accountants = [RDPAccountant() for _ in range(CLIENTS)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        engine = PrivacyEngine()

    def make_private(x: torch.Tensor, y: torch.Tensor):
        loader = torch.utils.data.DataLoader(TensorDataset(x, y), batch_size=BATCH)
        return engine.make_private(
            module=net,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=NOISE,
            max_grad_norm=CLIP,
            poisson_sampling=True,
        )

    private = None if path == "opacus-per-client" else make_private(*clients[0])
    global_params = [p.detach().clone() for p in net.parameters()]
    clock = harness.RoundClock()  # noted as lightfed's rounds are
    for round in range(rounds):
        clock.on_round_start(None, round)
        weighted, weight = [torch.zeros_like(p) for p in global_params], 0
        for c in sample_clients(SEED, round, CLIENTS, PER_ROUND):
            x, y = clients[c]
            module, dp_optimizer, loader = private if private is not None else make_private(x, y)
            if private is not None:  # Poisson sampling by index, batches by tensor indexing
                loader = UniformWithReplacementSampler(num_samples=len(y), sample_rate=1 / -(-len(y) // BATCH))
                dp_optimizer.expected_batch_size = int(len(y) * loader.sample_rate)
            with torch.no_grad():
                for p, g in zip(net.parameters(), global_params, strict=True):
                    p.copy_(g)
            optimizer.state.clear()
            for _ in range(EPOCHS):
                for batch in loader:
                    xb, yb = (x[batch], y[batch]) if private is not None else batch
                    dp_optimizer.zero_grad(set_to_none=True)
                    F.cross_entropy(module(xb), yb).backward()
                    dp_optimizer.step()
                    accountants[c].step(noise_multiplier=NOISE, sample_rate=loader.sample_rate)
            with torch.no_grad():
                for s, p, g in zip(weighted, net.parameters(), global_params, strict=True):
                    s.add_(p - g, alpha=len(y))
            weight += len(y)
            if private is None:
                module._close()
        with torch.no_grad():
            for g, s in zip(global_params, weighted, strict=True):
                g.add_(s / weight)
        clock.on_round_end(None, round, {})
    return clock.rounds()[1:]


def warm_accounting() -> float:
    """Seconds to compute the Renyi divergence of one step at every client's sample rate: a one-time cost per
    process (lightfed caches it per noise multiplier and sample rate), paid here before any path is timed."""
    federated = data()
    federated.setup(seed=SEED, device=torch.device("cpu"))
    rates = [poisson_schedule(federated.client_size(client_id), BATCH)[0] for client_id in range(CLIENTS)]
    times = harness.Times()
    times.measure(lambda: [_rdp_of_one_step(NOISE, rate) for rate in rates])
    return times.wall[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=PATHS)
    harness.add_json_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings(
        "ignore", message=".*(srun|Secure RNG|Optimal order|Full backward hook|new dataset object).*"
    )
    accounting_s = warm_accounting()
    print(f"one-time RDP of each client's sample rate: {accounting_s:.1f} s (not in the table)")
    times = {path: harness.Times() for path in args.paths}
    for _, path in harness.interleave(args.paths, args.repeats, alternate=True):
        times[path].extend((opacus_rounds if path.startswith("opacus") else lightfed_rounds)(path, args.rounds))
    wall = {path: measured.median for path, measured in times.items()}
    cpu = {path: measured.cpu_median for path, measured in times.items()}
    wall_x = harness.ratios(wall, "opacus") if "opacus" in times else {}
    cpu_x = harness.ratios(cpu, "opacus") if "opacus" in times else {}
    x = {path: [harness.cell(wall_x.get(path), ".2f"), harness.cell(cpu_x.get(path), ".2f")] for path in times}
    rows = ([path, f"{wall[path]:.3f}", x[path][0], f"{cpu[path]:.3f}", x[path][1]] for path in times)
    harness.print_table(["path", "wall s / round", "x opacus", "CPU s / round", "x opacus"], rows)
    rounds = {path: vars(measured) for path, measured in times.items()}
    figures = {"wall_s": wall, "wall_x_opacus": wall_x, "cpu_s": cpu, "cpu_x_opacus": cpu_x, "rounds": rounds}
    harness.write_json(args.json, {"accounting_s": accounting_s, **figures})


if __name__ == "__main__":
    main()
