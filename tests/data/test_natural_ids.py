"""NaturalIdPartitioner: one client per id the dataset brings; and the new partitioners built from YAML."""

import numpy as np
import pytest
import torch

from lightfed.cli import build_parser
from lightfed.data import (
    BalancedDirichletPartitioner,
    DatasetSource,
    NaturalIdPartitioner,
    QuantitySkewPartitioner,
    TensorSplits,
)
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError

IDS = np.array([30, 10, 20, 10, 30, 30, 20])


class Writers(DatasetSource):
    """Seven one-pixel examples whose value is their row, written by the writers in IDS."""

    def load(self, seed: int) -> TensorSplits:
        x = torch.arange(7.0).view(7, 1)
        return TensorSplits(
            x, torch.zeros(7, dtype=torch.int64), x[:2], torch.zeros(2, dtype=torch.int64), 1, train_client_ids=IDS
        )


def test_client_k_holds_the_examples_of_the_kth_id_in_sorted_order_whatever_the_seed() -> None:
    expected = [[1, 3], [2, 6], [0, 4, 5]]  # ids 10, 20, 30
    for seed in (0, 1):
        assert [part.tolist() for part in NaturalIdPartitioner().partition(None, seed, IDS)] == expected
    names = np.array(["carol", "alice", "bob", "alice"])
    assert [part.tolist() for part in NaturalIdPartitioner(3).partition(None, 0, names)] == [[1, 3], [2], [0]]


def test_the_data_module_splits_an_in_memory_dataset_by_its_ids() -> None:
    data = FederatedDataModule(Writers(), NaturalIdPartitioner(), batch_size=2, val_fraction=0.0)
    data.setup(seed=0, device=torch.device("cpu"))
    assert [data.client_size(k) for k in range(data.num_clients)] == [2, 2, 3]
    rows = [torch.cat([x for x, _ in data.client_eval_batches(k)]).flatten().tolist() for k in range(3)]
    assert rows == [[1.0, 3.0], [2.0, 6.0], [0.0, 4.0, 5.0]]


def test_more_clients_than_ids_leaves_one_empty_and_fewer_is_refused_too() -> None:
    with pytest.raises(ConfigError, match="leaves client 3 empty"):
        NaturalIdPartitioner(4).partition(None, 0, IDS)
    with pytest.raises(ConfigError, match="3 distinct client ids but num_clients is 2; set num_clients to 3 or null"):
        NaturalIdPartitioner(2).partition(None, 0, IDS)


def test_a_dataset_without_ids_is_refused() -> None:
    with pytest.raises(ConfigError, match="NaturalIdPartitioner needs a client id per training example"):
        NaturalIdPartitioner().partition(np.zeros(7, dtype=np.int64), 0)


@pytest.mark.parametrize(
    "partitioner, cls",
    [
        (
            '{"class_path": "lightfed.data.QuantitySkewPartitioner", "init_args": {"num_clients": 5, "alpha": 0.3}}',
            QuantitySkewPartitioner,
        ),
        (
            '{"class_path": "lightfed.data.BalancedDirichletPartitioner", "init_args": {"num_clients": 5, "alpha": 0.3}}',
            BalancedDirichletPartitioner,
        ),
        ('{"class_path": "lightfed.data.NaturalIdPartitioner"}', NaturalIdPartitioner),
    ],
)
def test_the_partitioners_build_from_a_config(partitioner: str, cls: type) -> None:
    parser, _ = build_parser()
    config = parser.parse_args(["fit", "--data.partitioner", partitioner])
    built = parser.instantiate(config).fit.data.partitioner
    assert type(built) is cls and built.num_clients == (None if cls is NaturalIdPartitioner else 5)
