"""Flower's partitioners: lightfed's native ones that are defined the same way give Flower's partitions exactly, and
FlowerPartitioner gives any of Flower's (skipped without flwr-datasets)."""

import numpy as np
import pytest
import torch

from lightfed.data import (
    Digits,
    FlowerPartitioner,
    NaturalIdPartitioner,
    PathologicalPartitioner,
    SizeSkewPartitioner,
)
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from tests.conftest import QUICKSTART, refusal_lines

LABELS = np.random.default_rng(0).integers(0, 10, 600)


def test_pathological_deals_each_class_to_its_holders_in_client_order():
    labels = np.array([0, 0, 1, 1, 2, 2])
    parts = PathologicalPartitioner(3, classes_per_client=2, assignment="deterministic").partition(labels, seed=0)
    # client 0 holds classes 0 and 1, client 1 classes 1 and 2, client 2 classes 2 and 0
    assert [part.tolist() for part in parts] == [[0, 2], [3, 4], [1, 5]]
    with pytest.raises(ConfigError, match="leaves client 2 empty"):
        PathologicalPartitioner(3, classes_per_client=1, assignment="deterministic").partition(np.array([0, 1]), 0)
    with pytest.raises(ConfigError, match="classes_per_client=3 is more than the 2 classes"):
        PathologicalPartitioner(2, classes_per_client=3).partition(np.array([0, 1, 0]), 0)


def test_size_skew_gives_client_k_a_share_proportional_to_k_and_the_last_the_rest():
    linear = SizeSkewPartitioner(4, "linear", shuffle=False).partition(np.zeros(10), seed=0)
    assert [part.tolist() for part in linear] == [[0], [1, 2], [3, 4, 5], [6, 7, 8, 9]]
    square = SizeSkewPartitioner(3, "square").partition(np.zeros(28), seed=1)  # 1 : 4 : 9 of 28 -> 2, 8, 18
    assert [len(part) for part in square] == [2, 8, 18]
    assert sorted(np.concatenate(square).tolist()) == list(range(28))
    assert square[0].tolist() != [0, 1]  # shuffled from the seed
    with pytest.raises(ConfigError, match="leaves client 0 empty"):
        SizeSkewPartitioner(5, "exponential").partition(np.zeros(20), seed=0)


@pytest.fixture
def partitioner():
    """Flower Datasets' partitioners; the tests that compare with them are skipped without flwr-datasets."""
    return pytest.importorskip("flwr_datasets.partitioner", reason="needs flwr-datasets (pip install 'lightfed[flwr]')")


def flower_parts(flower, **columns) -> list[list[int]]:
    """Flower's partitions of a Dataset of ``columns``, as sorted lists of positions."""
    import datasets

    flower.dataset = datasets.Dataset.from_dict({"position": np.arange(len(next(iter(columns.values())))), **columns})
    return [sorted(flower.load_partition(k)["position"]) for k in range(flower.num_partitions)]


@pytest.mark.parametrize("assignment", ["random", "deterministic", "first-deterministic"])
def test_pathological_gives_flowers_partition_for_the_same_seed(partitioner, assignment):
    ours = PathologicalPartitioner(12, classes_per_client=3, assignment=assignment).partition(LABELS, seed=7)
    theirs = flower_parts(partitioner.PathologicalPartitioner(12, "label", 3, assignment, seed=7), label=LABELS)
    assert [part.tolist() for part in ours] == theirs


@pytest.mark.parametrize(
    "growth, flower",
    [("linear", "LinearPartitioner"), ("square", "SquarePartitioner"), ("exponential", "ExponentialPartitioner")],
)
def test_size_skew_without_shuffle_gives_flowers_linear_square_and_exponential_partitions(partitioner, growth, flower):
    ours = SizeSkewPartitioner(6, growth, shuffle=False).partition(LABELS, seed=0)
    assert [part.tolist() for part in ours] == flower_parts(getattr(partitioner, flower)(6), label=LABELS)


def test_natural_ids_give_flowers_partition_in_flowers_order(partitioner):
    ids = np.random.default_rng(1).choice(["w7", "w3", "w10", "a1"], 200)
    ours = NaturalIdPartitioner().partition(None, seed=0, client_ids=ids)
    assert [part.tolist() for part in ours] == flower_parts(partitioner.NaturalIdPartitioner("writer"), writer=ids)


@pytest.mark.parametrize(
    "name, options",
    [
        ("DirichletPartitioner", {"num_partitions": 8, "partition_by": "label", "alpha": 0.3, "min_partition_size": 5}),
        ("ShardPartitioner", {"num_partitions": 8, "partition_by": "label", "num_shards_per_partition": 2}),
        (
            "flwr_datasets.partitioner.InnerDirichletPartitioner",
            {"partition_sizes": [100] * 6, "partition_by": "label", "alpha": 0.5},
        ),
    ],
)
def test_flower_partitioner_gives_flowers_partition_with_the_runs_seed(partitioner, name, options):
    ours = [part.tolist() for part in FlowerPartitioner(name, options).partition(LABELS, seed=5)]
    flower_class = getattr(partitioner, name.rpartition(".")[2])
    assert ours == flower_parts(flower_class(**options, seed=5), label=LABELS)
    assert ours != [part.tolist() for part in FlowerPartitioner(name, options).partition(LABELS, seed=6)]


def test_flower_partitioner_splits_a_federation_by_natural_id_and_refuses_what_flower_refuses(partitioner):
    data = FederatedDataModule(Digits(), FlowerPartitioner("IidPartitioner", {"num_partitions": 5}), val_fraction=0.1)
    data.setup(seed=0, device=torch.device("cpu"))
    assert (
        data.num_clients == 5 and sum(data.client_size(k) for k in range(5)) == 1293
    )  # 1437 less round(143.7) validation
    ids = np.repeat(np.arange(4), 5)
    parts = FlowerPartitioner("NaturalIdPartitioner", {"partition_by": "client_id"}).partition(None, 0, ids)
    assert [part.tolist() for part in parts] == [list(range(5 * k, 5 * k + 5)) for k in range(4)]
    with pytest.raises(ConfigError, match="partitions by label but the dataset gives none"):
        FlowerPartitioner(
            "DirichletPartitioner", {"num_partitions": 2, "partition_by": "label", "alpha": 1.0}
        ).partition(None, 0, ids)
    with pytest.raises(ConfigError, match="flwr_datasets.partitioner has no Missing"):
        FlowerPartitioner("Missing").partition(LABELS, 0)


def test_a_partitioner_that_is_not_a_flower_partitioner_is_refused_and_never_called(partitioner, tmp_path, capsys):
    """A config is parsed into objects, not into any function it names: ``subprocess.run`` with a shell command as
    ``partitioner`` is refused in one line and the command does not run."""
    mark = tmp_path / "ran"
    config = tmp_path / "config.yaml"
    config.write_text(
        "data:\n  partitioner:\n    class_path: lightfed.data.FlowerPartitioner\n    init_args:\n"
        f"      partitioner: subprocess.run\n      options: {{args: 'touch {mark}', shell: true}}\n"
    )
    argv = ["test", "--config", str(QUICKSTART), "--config", str(config), "--trainer.root_dir", str(tmp_path / "runs")]
    assert refusal_lines(argv, capsys) == [
        "lightfed: error: FlowerPartitioner's partitioner must name a Partitioner class of Flower Datasets "
        "(flwr_datasets.partitioner), got 'subprocess.run'"
    ]
    assert not mark.exists() and not (tmp_path / "runs").exists()
