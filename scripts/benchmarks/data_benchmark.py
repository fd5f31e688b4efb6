"""Milliseconds to produce one client's epoch of training batches from in-memory tensors, against a hand-written loop.

lightfed's in-memory path (``FederatedDataModule.client_batches``: a seeded shuffle of the client's index list, then
one gather of images and labels per batch) against the best hand-written way to do the same work: the same shuffle and
the same gathers written inline, with no generator objects or method calls in between. Both touch every batch the
same way (its images are summed, so nothing is left lazy), interleaved, on the same data; each figure is the median
over ``--repeats`` passes over every client, and the ratio is lightfed's time over the loop's. With ``--augmentation``
lightfed's batches also go through the CIFAR recipe (random crop after padding 4, horizontal flip), shown beside the
plain figures for its cost.

Workloads: ``digits`` (the embedded default: 20 Dirichlet(0.3) clients, batch 16) and ``cifar`` (CIFAR-shaped
synthetic data from ``lightfed.experiments.synthetic_cifar``: 100 IID clients of 500 images, batch 32).

    python scripts/benchmarks/data_benchmark.py
    python scripts/benchmarks/data_benchmark.py --device cuda --augmentation
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import torch
from torch import Tensor

from lightfed.experiments.synthetic_cifar import SyntheticCIFAR

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", choices=("digits", "cifar"), default=["digits", "cifar"])
    p.add_argument("--repeats", type=int, default=5, help="passes over every client; the median is printed")
    p.add_argument("--device", default="cpu")
    p.add_argument("--augmentation", action="store_true", help="also time lightfed's batches with crop and flip")
    harness.add_json_option(p)
    args = p.parse_args(argv)
    harness.require_at_least(p, args, 1, "repeats")
    return args


def make_data(workload: str, device: torch.device, augmentation: bool):
    """The workload's data module, set up on ``device`` (it runs against lightfed versions before augmentation too)."""
    from lightfed.data import Digits, DirichletPartitioner, IIDPartitioner
    from lightfed.data.module import FederatedDataModule

    crop_flip = {}
    if augmentation:
        from lightfed.data import Augmentation

        crop_flip = {"augmentation": Augmentation(padding=4, horizontal_flip=True)}
    if workload == "digits":
        data = FederatedDataModule(Digits(), DirichletPartitioner(20, alpha=0.3), batch_size=16, **crop_flip)
    else:
        source = SyntheticCIFAR(100 * 500, 100)
        data = FederatedDataModule(source, IIDPartitioner(100), batch_size=32, **crop_flip)
    data.setup(seed=0, device=device)
    return data


def lightfed_pass(data, seed: int) -> Tensor:
    """One epoch of every client's batches through ``client_batches``."""
    total = torch.zeros((), device=data.train_x.device)
    for client in range(data.num_clients):
        for x, _ in data.client_batches(client, torch.Generator().manual_seed(seed + client), epochs=1):
            total += x.sum()
    return total


def hand_written_pass(x: Tensor, y: Tensor, clients: list[Tensor], batch_size: int, seed: int) -> Tensor:
    """The same shuffles and gathers, inline."""
    total = torch.zeros((), device=x.device)
    for client, indices in enumerate(clients):
        order = indices[
            torch.randperm(len(indices), generator=torch.Generator().manual_seed(seed + client)).to(indices.device)
        ]
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            total += x[index].sum()
            y[index]
    return total


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device(args.device)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), device {device}; "
        f"median of {args.repeats} passes over every client (ms per client epoch)"
    )
    print(
        "\n" + harness.markdown_table(["workload", "lightfed", "hand-written", "ratio", "with crop+flip"], (), "lrrrr")
    )
    sync, figures = harness.synchronizer(device), {}
    for workload in args.workloads:
        data = make_data(workload, device, augmentation=False)
        augmented = make_data(workload, device, augmentation=True) if args.augmentation else None
        x, y, clients = data.train_x, data.train_y, data._client_indices
        assert torch.equal(lightfed_pass(data, 0), hand_written_pass(x, y, clients, data.batch_size, 0))
        times = {"lightfed": harness.Times(), "hand-written": harness.Times(), "with crop+flip": harness.Times()}
        for repeat in range(args.repeats):  # each pass its own shuffles
            times["lightfed"].measure(partial(lightfed_pass, data, repeat), sync)
            times["hand-written"].measure(partial(hand_written_pass, x, y, clients, data.batch_size, repeat), sync)
            if augmented is not None:
                times["with crop+flip"].measure(partial(lightfed_pass, augmented, repeat), sync)
        ms = {name: measured.median * 1e3 / data.num_clients for name, measured in times.items() if measured.wall}
        figures[workload] = {"ms_per_client_epoch": ms, "ratio": ms["lightfed"] / ms["hand-written"]}
        cells = [ms["lightfed"], ms["hand-written"], figures[workload]["ratio"], ms.get("with crop+flip")]
        print(harness.markdown_row([workload, *(harness.cell(value, ".3f") for value in cells)]), flush=True)
    harness.write_json(args.json, figures)


if __name__ == "__main__":
    main()
