import numpy as np
import pytest

from lightfed.data import (
    BalancedDirichletPartitioner,
    DirichletPartitioner,
    IIDPartitioner,
    Partitioner,
    QuantitySkewPartitioner,
    ShardPartitioner,
)
from lightfed.errors import ConfigError

# 10 balanced classes of 200 examples, in label order
LABELS = np.repeat(np.arange(10), 200)

PARTITIONERS = [
    IIDPartitioner(7),
    DirichletPartitioner(10, alpha=0.5, min_size=10),
    ShardPartitioner(10, classes_per_client=2),
    QuantitySkewPartitioner(10, alpha=0.5, min_size=10),
    BalancedDirichletPartitioner(10, alpha=0.5),
]


def label_distance_to_uniform(labels: np.ndarray, part: np.ndarray) -> float:
    """Total-variation distance between a part's label distribution and the dataset's (uniform over 10 classes)."""
    return 0.5 * float(np.abs(np.bincount(labels[part], minlength=10) / len(part) - 0.1).sum())


def mean_label_entropy(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    entropies = []
    for part in parts:
        p = np.bincount(labels[part], minlength=10) / len(part)
        p = p[p > 0]
        entropies.append(-(p * np.log(p)).sum())
    return float(np.mean(entropies))


@pytest.mark.parametrize("partitioner", PARTITIONERS, ids=lambda p: type(p).__name__)
def test_parts_are_disjoint_sorted_and_cover_the_dataset(partitioner: Partitioner) -> None:
    parts = partitioner.partition(LABELS, seed=0)
    assert len(parts) == partitioner.num_clients
    assert all(part.dtype == np.int64 and np.all(np.diff(part) > 0) for part in parts)
    assert sum(len(part) for part in parts) == len(LABELS)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(len(LABELS)))


@pytest.mark.parametrize("partitioner", PARTITIONERS, ids=lambda p: type(p).__name__)
def test_same_seed_same_parts_other_seed_other_parts(partitioner: Partitioner) -> None:
    first, again, other = (partitioner.partition(LABELS, seed) for seed in (3, 3, 4))
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=False))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=False))


def test_iid_sizes_differ_by_at_most_one() -> None:
    sizes = [len(part) for part in IIDPartitioner(7).partition(LABELS, seed=0)]
    assert sorted(sizes) == [285] * 2 + [286] * 5  # 2000 = 7 * 285 + 5


def test_iid_parts_are_not_contiguous_ranges() -> None:
    part = IIDPartitioner(4).partition(LABELS, seed=0)[0]
    assert part[-1] - part[0] + 1 > len(part)


def test_more_clients_than_examples_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="client 3 empty"):
        IIDPartitioner(4).partition(np.zeros(3, dtype=np.int64), seed=0)


def test_dirichlet_skew_grows_as_alpha_falls() -> None:
    entropies = [
        mean_label_entropy(LABELS, DirichletPartitioner(10, alpha=alpha).partition(LABELS, seed=0))
        for alpha in (100.0, 1.0, 0.05)
    ]
    assert entropies[0] > entropies[1] > entropies[2]
    assert entropies[0] > 0.95 * np.log(10)  # near uniform labels on every client
    assert entropies[2] < 0.5 * np.log(10)


def test_dirichlet_respects_min_size() -> None:
    unconstrained = DirichletPartitioner(20, alpha=0.5, min_size=1).partition(LABELS, seed=0)
    assert min(len(part) for part in unconstrained) < 50  # so min_size=50 has to redraw
    parts = DirichletPartitioner(20, alpha=0.5, min_size=50).partition(LABELS, seed=0)
    assert min(len(part) for part in parts) >= 50


@pytest.mark.parametrize("alpha", [0.0, -1.0])
def test_dirichlet_alpha_must_be_positive(alpha: float) -> None:
    with pytest.raises(ConfigError, match="alpha must be > 0"):
        DirichletPartitioner(10, alpha=alpha)


def test_dirichlet_min_size_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="min_size"):
        DirichletPartitioner(10, min_size=0)


def test_dirichlet_impossible_min_size_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="lower min_size"):
        DirichletPartitioner(10, min_size=201).partition(LABELS, seed=0)


def test_dirichlet_unreachable_min_size_is_a_config_error() -> None:
    # each client needs 199 of 2000 examples: only near-equal splits qualify, which alpha=0.01 never draws
    partitioner = DirichletPartitioner(10, alpha=0.01, min_size=199)
    partitioner.max_tries = 20
    with pytest.raises(ConfigError, match="raise alpha"):
        partitioner.partition(LABELS, seed=0)


def test_shards_give_each_client_at_most_classes_per_client_labels() -> None:
    for classes_per_client in (1, 2, 4):
        parts = ShardPartitioner(10, classes_per_client).partition(LABELS, seed=0)
        assert all(len(np.unique(LABELS[part])) <= classes_per_client for part in parts)
        # 2000 examples in 10 * classes_per_client shards of equal size
        assert all(len(part) == 200 for part in parts)


def test_shards_need_at_least_one_example_each() -> None:
    with pytest.raises(ConfigError, match="shards"):
        ShardPartitioner(10, classes_per_client=2).partition(np.arange(19), seed=0)


def test_num_clients_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="num_clients"):
        IIDPartitioner(0)


def test_quantity_skew_skews_sizes_and_keeps_labels_near_the_datasets() -> None:
    parts = QuantitySkewPartitioner(10, alpha=0.5, min_size=10).partition(LABELS, seed=0)
    sizes = np.array([len(part) for part in parts])
    assert sizes.sum() == 2000 and sizes.min() >= 10
    assert sizes.max() > 5 * sizes.min()  # equal parts would hold 200 each
    large = [part for part in parts if len(part) >= 200]
    assert large and max(label_distance_to_uniform(LABELS, part) for part in large) < 0.1
    label_skewed = DirichletPartitioner(10, alpha=0.5).partition(LABELS, seed=0)
    assert np.mean([label_distance_to_uniform(LABELS, part) for part in label_skewed]) > 0.3


def test_quantity_skew_flattens_as_alpha_grows_and_keeps_min_size() -> None:
    # Dir(1e4) shares of the 2000 - 10 * 10 examples left: 190 each, give or take a few
    flat = QuantitySkewPartitioner(10, alpha=1e4, min_size=10).partition(LABELS, seed=0)
    assert all(abs(len(part) - 200) <= 10 for part in flat)
    skewed = QuantitySkewPartitioner(10, alpha=0.1, min_size=150).partition(LABELS, seed=0)
    assert min(len(part) for part in skewed) >= 150 and max(len(part) for part in skewed) > 300
    with pytest.raises(ConfigError, match="lower min_size"):
        QuantitySkewPartitioner(10, min_size=201).partition(LABELS, seed=0)


def test_balanced_dirichlet_sizes_differ_by_at_most_one_and_skew_grows_as_alpha_falls() -> None:
    sizes = [len(part) for part in BalancedDirichletPartitioner(7, alpha=0.1).partition(LABELS, seed=0)]
    assert sorted(sizes) == [285] * 2 + [286] * 5  # 2000 = 7 * 285 + 5
    entropies = [
        mean_label_entropy(LABELS, BalancedDirichletPartitioner(10, alpha=alpha).partition(LABELS, seed=0))
        for alpha in (100.0, 1.0, 0.05)
    ]
    assert entropies[0] > entropies[1] > entropies[2]
    assert entropies[0] > 0.95 * np.log(10) and entropies[2] < 0.5 * np.log(10)


@pytest.mark.parametrize(
    "partitioner",
    [QuantitySkewPartitioner(4, min_size=1), BalancedDirichletPartitioner(4)],
    ids=lambda p: type(p).__name__,
)
def test_new_partitioners_refuse_empty_clients(partitioner: Partitioner) -> None:
    with pytest.raises(ConfigError, match="client 3 empty|lower min_size"):
        partitioner.partition(np.zeros(3, dtype=np.int64), seed=0)


@pytest.mark.parametrize("cls", [QuantitySkewPartitioner, BalancedDirichletPartitioner])
def test_new_partitioners_need_a_positive_alpha(cls) -> None:
    with pytest.raises(ConfigError, match="alpha must be > 0"):
        cls(10, alpha=0.0)
