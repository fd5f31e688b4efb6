import pytest
import torch

from lightfed.data import Digits, IIDPartitioner, Synthetic
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError

CPU = torch.device("cpu")


def _data(batch_size: int = 16) -> FederatedDataModule:
    data = FederatedDataModule(Digits(), IIDPartitioner(10), batch_size=batch_size, eval_batch_size=100)
    data.setup(seed=0, device=CPU)
    return data


def _example_ids(data: FederatedDataModule, x: torch.Tensor) -> list[int]:
    """Row numbers in train_x of the examples in ``x`` (digits rows are unique enough with their labels)."""
    flat = data.train_x.flatten(1)
    return [int((flat == row).all(1).nonzero()[0]) for row in x.flatten(1)]


def test_an_epoch_visits_each_example_of_the_client_once_in_a_seeded_order():
    data = _data()
    size = data.client_size(3)
    batches = list(data.client_batches(3, torch.Generator().manual_seed(1), epochs=2))
    assert [len(y) for _, y in batches] == 2 * ([16] * (size // 16) + ([size % 16] if size % 16 else []))
    first_epoch = torch.cat([x for x, _ in batches[: len(batches) // 2]])
    assert sorted(_example_ids(data, first_epoch)) == sorted(data._client_indices[3].tolist())
    again = list(data.client_batches(3, torch.Generator().manual_seed(1), epochs=2))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again, strict=False))
    other = next(data.client_batches(3, torch.Generator().manual_seed(2), epochs=1))
    assert not torch.equal(other[0], batches[0][0])


def test_steps_mode_takes_exactly_that_many_batches_across_epochs():
    data = _data(batch_size=64)
    per_epoch = -(-data.client_size(0) // 64)
    steps = 2 * per_epoch + 1
    assert len(list(data.client_batches(0, torch.Generator().manual_seed(0), steps=steps))) == steps


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_test_set_shards_cover_it_exactly_once(world_size):
    data = _data()
    labels = torch.cat([y for rank in range(world_size) for _, y in data.test_batches(rank, world_size)])
    assert torch.equal(labels, data.test_y)


def test_naturally_federated_data_takes_no_partitioner_and_others_need_one():
    with pytest.raises(ConfigError, match="already split across clients; remove data.partitioner"):
        FederatedDataModule(Synthetic(num_clients=3), IIDPartitioner(3)).setup(0, CPU)
    with pytest.raises(ConfigError, match="Digits needs data.partitioner"):
        FederatedDataModule(Digits()).setup(0, CPU)
    natural = FederatedDataModule(Synthetic(num_clients=3))
    natural.setup(0, CPU)
    assert natural.num_clients == 3 and natural.num_classes == 10


def test_each_data_module_gets_its_own_default_dataset():
    first, second = FederatedDataModule(), FederatedDataModule()
    assert isinstance(first.dataset, Digits) and first.dataset is not second.dataset
