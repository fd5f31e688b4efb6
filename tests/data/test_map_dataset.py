"""MapDataset: a file-backed map-style Dataset split across clients, read through DataLoaders, trained end to end."""

import time
from functools import partial
from pathlib import Path

import pytest
import torch
from lightning.fabric import Fabric
from torch.utils.data import TensorDataset

from lightfed.core.messages import ClientPlan
from lightfed.data import (
    DatasetSource,
    Digits,
    DirichletPartitioner,
    IIDPartitioner,
    MapDataset,
    NaturalIdPartitioner,
    TensorSplits,
)
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.models import MLP
from lightfed.privacy import DPSGD
from lightfed.run.client import ClientTrainer
from lightfed.strategies import FedAvg
from tests.conftest import fit_in_subprocess, small_model, small_trainer
from tests.data.npy_folder import NpyFolder, write_digits

CPU = torch.device("cpu")
NUM_TRAIN, NUM_TEST = 96, 40
REFERENCE = Digits().load(seed=0)  # the files hold its first NUM_TRAIN train and NUM_TEST test examples


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path]:
    return write_digits(tmp_path_factory.mktemp("digits"), NUM_TRAIN, NUM_TEST)


def file_data(folders, num_workers: int = 0, val_fraction: float = 0.0, **settings) -> FederatedDataModule:
    """The files' federation; no validation split unless asked, so that the clients hold all 96 examples."""
    train, test = folders
    dataset = MapDataset(NpyFolder(str(train)), NpyFolder(str(test)))
    data = FederatedDataModule(
        dataset,
        IIDPartitioner(4),
        batch_size=8,
        eval_batch_size=16,
        num_workers=num_workers,
        val_fraction=val_fraction,
        **settings,
    )
    data.setup(seed=0, device=CPU)
    return data


class InMemory(DatasetSource):
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def load(self, seed: int) -> TensorSplits:
        return TensorSplits(self.x, self.y, self.x, self.y, num_classes=3)


def example_ids(x: torch.Tensor) -> list[int]:
    """Rows of the reference train_x equal to the rows of ``x`` (the first file examples are distinct)."""
    flat = REFERENCE.train_x[:NUM_TRAIN].flatten(1)
    return [int((flat == row).all(1).nonzero()[0]) for row in x.flatten(1)]


def test_an_epoch_reads_each_example_of_the_client_once_in_an_order_fixed_by_the_seed(folders):
    data = file_data(folders)
    own = sorted(data._client_indices[1].tolist())
    assert len(own) == 24  # 96 examples in 4 IID parts
    batches = list(data.client_batches(1, torch.Generator().manual_seed(5), epochs=2))
    assert [len(y) for _, y in batches] == [8] * 6  # 3 batches of 8 per pass
    epochs = [example_ids(torch.cat([x for x, _ in batches[i : i + 3]])) for i in (0, 3)]
    assert sorted(epochs[0]) == sorted(epochs[1]) == own and epochs[0] != epochs[1]
    assert torch.equal(torch.cat([y for _, y in batches[:3]]), REFERENCE.train_y[epochs[0]])
    again = list(data.client_batches(1, torch.Generator().manual_seed(5), epochs=2))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(batches, again, strict=False))
    other = next(data.client_batches(1, torch.Generator().manual_seed(6), epochs=1))
    assert not torch.equal(other[0], batches[0][0])


def test_workers_read_the_same_batches_and_steps_take_the_first_ones(folders):
    in_process = list(file_data(folders).client_batches(2, torch.Generator().manual_seed(3), epochs=2))
    workers = list(file_data(folders, num_workers=2).client_batches(2, torch.Generator().manual_seed(3), steps=4))
    assert len(workers) == 4  # 4 steps of 3 batches per pass: all of the first pass, one of the second
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(in_process, workers, strict=False))


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_test_set_shards_cover_it_once_in_order(folders, world_size):
    data = file_data(folders)
    batches = [batch for rank in range(world_size) for batch in data.test_batches(rank, world_size)]
    assert torch.equal(torch.cat([x for x, _ in batches]), REFERENCE.test_x[:NUM_TEST])
    assert torch.equal(torch.cat([y for _, y in batches]), REFERENCE.test_y[:NUM_TEST])


def test_client_evaluation_reads_the_clients_examples_in_order(folders):
    data = file_data(folders)
    indices = data._client_indices[3]
    batches = list(data.client_eval_batches(3))
    assert [len(y) for _, y in batches] == [16, 8]
    assert torch.equal(torch.cat([x for x, _ in batches]), REFERENCE.train_x[indices])


def test_a_subset_reads_those_positions_and_an_empty_one_keeps_the_shapes(folders):
    data = file_data(folders)
    indices = data._client_indices[0]
    x, y = data.client_subset(0, torch.tensor([3, 0, 5]))
    rows = indices[[3, 0, 5]]
    assert torch.equal(x, REFERENCE.train_x[rows]) and torch.equal(y, REFERENCE.train_y[rows])
    x, y = data.client_subset(0, torch.tensor([], dtype=torch.long))
    assert x.shape == (0, 1, 8, 8) and y.shape == (0,) and y.dtype == torch.int64


def test_labels_come_from_targets_or_the_datasets_attribute():
    images, labels = torch.zeros(6, 1, 2, 2), torch.tensor([0, 1, 2, 0, 1, 2])
    unlabelled = TensorDataset(images, labels)  # no targets attribute
    with pytest.raises(ConfigError, match="DirichletPartitioner splits by label but the dataset has none"):
        FederatedDataModule(MapDataset(unlabelled, unlabelled), DirichletPartitioner(2, min_size=1)).setup(0, CPU)
    FederatedDataModule(MapDataset(unlabelled, unlabelled), IIDPartitioner(2)).setup(0, CPU)  # needs no labels
    with pytest.raises(ConfigError, match="MapDataset targets has 5 entries for 6 training examples"):
        MapDataset(unlabelled, unlabelled, targets=[0] * 5).load(0)
    data = FederatedDataModule(MapDataset(unlabelled, unlabelled, targets=labels.tolist()), IIDPartitioner(2))
    data.setup(0, CPU)
    assert data.num_classes == 3 and data.num_clients == 2
    by_writer = FederatedDataModule(
        MapDataset(unlabelled, unlabelled, client_ids=["b", "a", "b", "c", "a", "a"]),
        NaturalIdPartitioner(),
        val_fraction=0.0,
    )
    by_writer.setup(0, CPU)
    assert [ids.tolist() for ids in by_writer._client_indices] == [[1, 4, 5], [0, 2], [3]]


def test_a_file_backed_federation_learns_and_workers_do_not_change_its_weights(folders, tmp_path):
    def final_weights(num_workers: int) -> tuple[torch.Tensor, dict[str, float]]:
        model = small_model(lr=0.3)
        trainer = small_trainer(tmp_path / f"workers{num_workers}", rounds=4, clients_per_round=4, local_steps=8)
        metrics = trainer.fit(model, file_data(folders, num_workers, val_fraction=0.1), FedAvg())
        return torch.cat([p.detach().flatten() for p in model.parameters()]), metrics

    in_process, metrics = final_weights(0)
    assert not torch.equal(in_process, torch.cat([p.flatten() for p in small_model().parameters()]))
    assert metrics["val_acc"] > 0.5  # ten classes: chance is 0.1
    with_workers, _ = final_weights(2)
    assert torch.equal(in_process, with_workers)


class OneReaderAtATime(NpyFolder):
    """Counts the reads that overlap another; each read yields the GIL, so a concurrent read would enter meanwhile."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.reading, self.reads, self.overlaps = 0, 0, 0

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        self.reading += 1
        self.overlaps += self.reading > 1
        time.sleep(1e-3)
        self.reads += 1
        self.reading -= 1
        return super().__getitem__(index)


def test_clients_in_parallel_threads_read_a_map_dataset_one_read_at_a_time(folders, tmp_path):
    """A dataset's ``__getitem__`` need not be thread-safe: two clients train at once, their reads never overlap."""
    train, test = folders
    dataset = MapDataset(OneReaderAtATime(str(train)), NpyFolder(str(test)))
    data = FederatedDataModule(dataset, IIDPartitioner(4), batch_size=8, val_fraction=0.0)
    trainer = small_trainer(tmp_path, rounds=2, clients_per_round=4, local_steps=6, clients_in_parallel=2)
    trainer.fit(small_model(), data, FedAvg())
    assert dataset.train.reads >= 2 * 4 * 6 * 8 and dataset.train.overlaps == 0


@pytest.mark.slow
def test_one_and_two_processes_train_a_yaml_file_federation_to_the_same_weights(folders, tmp_path):
    """``lightfed fit`` from YAML with MapDataset, DataLoader workers and augmentation, on 1 and 2 processes."""
    train, test = folders
    config = tmp_path / "files.yaml"
    config.write_text(f"""
seed_everything: 0
trainer: {{accelerator: cpu, rounds: 2, clients_per_round: 4, local_epochs: null, local_steps: 3, name: run}}
model:
  class_path: lightfed.models.SmallCNN
  init_args: {{num_classes: 10, in_channels: 1, width: 8,
              optimizer: {{class_path: torch.optim.SGD, init_args: {{lr: 0.1}}}}}}
data:
  dataset:
    class_path: lightfed.data.MapDataset
    init_args:
      train: {{class_path: tests.data.npy_folder.NpyFolder, init_args: {{root: {train}}}}}
      test: {{class_path: tests.data.npy_folder.NpyFolder, init_args: {{root: {test}}}}}
  partitioner: {{class_path: lightfed.data.IIDPartitioner, init_args: {{num_clients: 4}}}}
  batch_size: 8
  num_workers: 1
  augmentation: {{padding: 1, horizontal_flip: true}}
""")

    def final_params(devices: int) -> dict:
        root = tmp_path / f"devices{devices}"
        fit_in_subprocess(config, root, devices)
        return torch.load(root / "run" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)

    one, two = final_params(1), final_params(2)
    assert one["round"] == two["round"] == 2
    assert (one["params"] - two["params"]).abs().max() <= 1e-5
    initial = torch.cat([p.detach().flatten() for p in small_model().parameters()])  # the CLI's model, seed 0
    assert (one["params"] - initial).abs().max() > 1e-3


def test_dp_sgd_reads_the_same_poisson_batches_from_a_map_dataset_as_from_tensors():
    """Noise 0, so the update is the clipped mean gradient of the Poisson batches: equal for both sources."""
    torch.manual_seed(0)
    x, y = torch.randn(12, 5), torch.arange(12) % 3
    sources = [InMemory(x, y), MapDataset(TensorDataset(x, y), TensorDataset(x, y), targets=y.tolist())]
    deltas = []
    for source in sources:
        data = FederatedDataModule(source, IIDPartitioner(1), batch_size=4)  # sample rate 1/3
        data.setup(seed=0, device=CPU)
        privacy = DPSGD(noise_multiplier=0.0, max_grad_norm=0.5)
        privacy.setup(data, clients_per_round=1, planned=lambda: [])
        model = MLP(in_features=5, num_classes=3, hidden=[], optimizer=partial(torch.optim.SGD, lr=0.5))
        client = ClientTrainer(Fabric(accelerator="cpu", devices=1), model, data, privacy)
        update = client.train(ClientPlan(client_id=0, round=0, seed=3, steps=6), torch.zeros(18), torch.zeros(0))
        deltas.append(update.delta.clone())
    assert deltas[0].abs().sum() > 0 and torch.equal(deltas[0], deltas[1])


def test_a_map_style_dataset_gives_no_tensors_and_says_so(folders):
    with pytest.raises(ConfigError, match="MapDataset is read through DataLoaders: train_x, test_x and the like"):
        _ = file_data(folders).train_x
