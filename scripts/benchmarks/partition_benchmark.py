"""Natural-id partition of a million rows: lightfed against Flower Datasets' NaturalIdPartitioner.

A FEMNIST-shaped id column (``--rows`` rows, ``--ids`` writers as strings, rows of a writer scattered) in a
``datasets.Dataset``; each partitioner makes every client's index list, and the script checks they agree as sets.
Prints a markdown table of seconds (the best of ``--repeats``)::

    TQDM_DISABLE=1 nice -n 10 python scripts/benchmarks/partition_benchmark.py --rows 1000000 --ids 3597 --repeats 3
"""

import argparse
import time
from collections.abc import Callable

import datasets
import numpy as np
from flwr_datasets.partitioner import NaturalIdPartitioner as FlowerNaturalId

from lightfed.data import NaturalIdPartitioner
from lightfed.data.natural_ids import natural_id_codes


def best_of(repeats: int, run: Callable[[], list[np.ndarray]]) -> tuple[float, float, list[np.ndarray]]:
    """The least wall-clock and CPU seconds of ``repeats`` runs (CPU time: what a loaded machine does not inflate)."""
    walls, cpus, parts = [], [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        parts = run()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), parts


def lightfed_parts(rows: datasets.Dataset) -> list[np.ndarray]:
    """The id column read as Arrow, coded by a group-by, split by NaturalIdPartitioner."""
    codes = natural_id_codes(rows.with_format("arrow")["writer_id"])[0]
    return NaturalIdPartitioner().partition(None, seed=0, client_ids=codes)


def flower_parts(rows: datasets.Dataset) -> list[np.ndarray]:
    """Flower's partitioner on the same Dataset: its id-to-indices map (built at the first load_partition)."""
    flower = FlowerNaturalId(partition_by="writer_id")
    flower.dataset = rows
    flower.load_partition(0)  # builds the map for every partition
    return [np.asarray(flower._partition_id_to_indices[k]) for k in range(flower.num_partitions)]  # no public getter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--ids", type=int, default=3597)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    datasets.disable_progress_bars()
    writers = np.char.add("f", np.random.default_rng(0).integers(0, args.ids, args.rows).astype(str))
    rows = datasets.Dataset.from_dict({"writer_id": writers})
    ours_s, ours_cpu, ours = best_of(args.repeats, lambda: lightfed_parts(rows))
    flower_s, flower_cpu, theirs = best_of(args.repeats, lambda: flower_parts(rows))
    assert [part.tolist() for part in ours] == [sorted(part.tolist()) for part in theirs], "partitions differ"
    print(f"{args.rows} rows, {len(ours)} natural ids (the same partitions; seconds, best of {args.repeats})\n")
    print("| partitioner | wall-clock s | CPU s |\n|---|---|---|")
    print(f"| lightfed `NaturalIdPartitioner` (Arrow group-by codes) | {ours_s:.2f} | {ours_cpu:.2f} |")
    print(f"| Flower Datasets `NaturalIdPartitioner` | {flower_s:.2f} | {flower_cpu:.2f} |")


if __name__ == "__main__":
    main()
