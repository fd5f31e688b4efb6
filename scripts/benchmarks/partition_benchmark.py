"""Natural-id partition of a million rows: lightfed against Flower Datasets' NaturalIdPartitioner.

A FEMNIST-shaped id column (``--rows`` rows, ``--ids`` writers as strings, rows of a writer scattered) in a
``datasets.Dataset``; each partitioner makes every client's index list, and the script checks they agree as sets.
Prints a markdown table of seconds (the best of ``--repeats``)::

    TQDM_DISABLE=1 nice -n 10 python scripts/benchmarks/partition_benchmark.py --rows 1000000 --ids 3597 --repeats 3
"""

import argparse
import sys
from pathlib import Path

import datasets
import numpy as np
from flwr_datasets.partitioner import NaturalIdPartitioner as FlowerNaturalId

from lightfed.data import NaturalIdPartitioner
from lightfed.data.natural_ids import natural_id_codes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402


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
    harness.add_json_option(parser)
    args = parser.parse_args()
    datasets.disable_progress_bars()
    writers = np.char.add("f", np.random.default_rng(0).integers(0, args.ids, args.rows).astype(str))
    rows = datasets.Dataset.from_dict({"writer_id": writers})
    # the least wall-clock and CPU seconds of the repeats (CPU time: what a loaded machine does not inflate)
    ours, theirs = harness.Times(), harness.Times()
    for _ in range(args.repeats):
        lightfed = ours.measure(lambda: lightfed_parts(rows))
    for _ in range(args.repeats):
        flower = theirs.measure(lambda: flower_parts(rows))
    assert [part.tolist() for part in lightfed] == [sorted(part.tolist()) for part in flower], "partitions differ"
    print(f"{args.rows} rows, {len(lightfed)} natural ids (the same partitions; seconds, best of {args.repeats})\n")
    times = {
        "lightfed `NaturalIdPartitioner` (Arrow group-by codes)": ours,
        "Flower Datasets `NaturalIdPartitioner`": theirs,
    }
    table = ([name, f"{measured.best:.2f}", f"{measured.cpu_best:.2f}"] for name, measured in times.items())
    harness.print_table(["partitioner", "wall-clock s", "CPU s"], table)
    figures = {name: {"best_s": measured.best, "best_cpu_s": measured.cpu_best} for name, measured in times.items()}
    harness.write_json(args.json, {"rows": args.rows, "ids": len(lightfed), "partitioners": figures})


if __name__ == "__main__":
    main()
