"""A LightningDataModule as a dataset source: its datasets, transforms and labels, split across clients."""

import operator
import os

import lightning as L
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Subset, TensorDataset, random_split

from lightfed.data import DataModuleSource, DirichletPartitioner, IIDPartitioner
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.models import SmallCNN
from lightfed.strategies import FedAvg
from tests.conftest import small_trainer
from tests.data.user_datamodules import BlobsDataModule, DictBlobs, FakeImages, blobs

CPU = torch.device("cpu")


def test_fakedata_in_a_user_datamodule_trains_with_a_dirichlet_split(tmp_path):
    """FakeData has no targets attribute: its labels come from one pass over the examples."""
    data = FederatedDataModule(FakeImages(), DirichletPartitioner(4, alpha=0.5, min_size=5), batch_size=8)
    data.setup(seed=0, device=CPU)
    train = data.dataset.load(0).train  # the random_split Subset of FakeData, as the module built it
    labels = np.array([int(train[i][1]) for i in range(len(train))])
    held = set(data.val_indices.tolist())
    clients = [data._client_indices[k].numpy() for k in range(4)]
    assert sorted(np.concatenate(clients).tolist() + sorted(held)) == list(range(len(train)))
    assert [len(set(labels[c])) for c in clients] != [4] * 4 or len({len(c) for c in clients}) > 1  # skewed
    x, y = next(data.client_batches(0, torch.Generator().manual_seed(0), epochs=1))
    assert x.shape == (8, 1, 8, 8) and x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1  # ToTensor kept
    model = SmallCNN(num_classes=4, in_channels=1)
    metrics = small_trainer(tmp_path, rounds=2, clients_per_round=4).fit(model, data, FedAvg())
    assert np.isfinite(metrics["val_loss"]) and metrics["round/clients"] == 4


def test_the_labels_found_by_one_pass_are_the_datasets_and_are_read_once():
    source = DataModuleSource(FakeImages(size=40))
    splits = source.load(0)
    assert splits.train_labels.tolist() == [int(splits.train[i][1]) for i in range(36)]
    assert source.load(0).train_labels is splits.train_labels  # cached: no second pass


def test_prepare_data_and_setup_run_and_the_modules_validation_set_is_the_validation_split():
    module = BlobsDataModule()
    data = FederatedDataModule(module, IIDPartitioner(4), val_fraction=0.1)
    data.setup(seed=0, device=CPU)
    assert module.calls[:2] == ["prepare_data", "setup:fit"]
    assert data.val_indices.tolist() == list(range(240, 270))  # its 30 validation examples, after the 240
    assert sum(data.client_size(k) for k in range(4)) == 240  # every training example goes to a client
    x, y = next(data.val_batches())
    assert torch.equal(y, module.val.tensors[1])
    test_y = torch.cat([batch[1] for batch in data.test_batches()])
    assert torch.equal(test_y, module.test.tensors[1])


def test_without_a_validation_set_the_share_is_held_out_from_the_training_set():
    data = FederatedDataModule(BlobsDataModule(with_val=False), IIDPartitioner(4), val_fraction=0.1)
    data.setup(seed=0, device=CPU)
    assert len(data.val_indices) == 24 and int(data.val_indices.max()) < 240


def test_dict_examples_take_their_label_from_label_key():
    """The module's 30 validation examples follow its 240 training ones, their labels never read (-1)."""
    labels = DataModuleSource(DictBlobs(), label_key="label").load(0).train_labels
    assert labels.tolist() == _blobs_labels() + [-1] * 30
    assert DataModuleSource(DictBlobs()).load(0).train_labels.tolist() == _blobs_labels() + [-1] * 30  # by name
    by_callable = DataModuleSource(DictBlobs(), label_key=lambda example: 2 - int(example["label"])).load(0)
    assert by_callable.train_labels[:240].tolist() == [2 - label for label in _blobs_labels()]


def _blobs_labels() -> list[int]:
    module = BlobsDataModule()
    module.setup("fit")
    return module.train.tensors[1].tolist()


@pytest.mark.parametrize("library_function", [os.system, eval, operator.itemgetter(0)])
def test_a_label_key_that_is_a_library_function_is_refused_before_any_example_is_read(library_function):
    """Refused where the source is built, before the module's setup reads an example."""
    with pytest.raises(ConfigError, match=r"^label_key: .* not lightfed's or your own code"):
        DataModuleSource(DictBlobs(), label_key=library_function)


def test_a_dataset_without_labels_splits_iid_and_is_refused_by_a_label_partitioner():
    source = DataModuleSource(DictBlobs(), label_key="missing")
    with pytest.raises(ConfigError, match=r"label_key 'missing'.*DictBlobs"):
        source.load(0)
    unlabelled = DataModuleSource(DictBlobs(), label_key=None, find_labels=False)
    assert unlabelled.load(0).train_labels is None
    FederatedDataModule(unlabelled, IIDPartitioner(2)).setup(seed=0, device=CPU)
    with pytest.raises(ConfigError, match=r"DirichletPartitioner splits by label.*label_key"):
        FederatedDataModule(unlabelled, DirichletPartitioner(2)).setup(seed=0, device=CPU)


class UnseededSplit(L.LightningDataModule):
    """Splits one dataset by ``random_split`` in every ``setup``, whatever the stage, without a generator."""

    def setup(self, stage: str) -> None:
        self.train, self.val, self.test = random_split(blobs(90, 0), [30, 30, 30])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test)


def test_setup_called_per_stage_splits_alike_so_no_training_example_is_a_test_example():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    splits = DataModuleSource(UnseededSplit()).load(seed=0)
    assert torch.equal(torch.get_rng_state(), state)  # the run's own random stream is left as it was
    train, test = splits.train.datasets[0], splits.test  # type: ignore[union-attr]
    assert not set(train.indices) & set(test.indices) and len(set(train.indices) | set(test.indices)) == 60


class ValidationIsTest(BlobsDataModule):
    """The idiom ``test_dataloader`` returning ``val_dataloader``, or a fresh Subset of the same examples."""

    def __init__(self, same_object: bool) -> None:
        super().__init__()
        self.same_object = same_object

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val if self.same_object else Subset(self.test, [0, 1, 2]))

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader() if self.same_object else DataLoader(Subset(self.test, [0, 1, 2]))


@pytest.mark.parametrize("same_object", [True, False])
def test_a_validation_set_that_is_the_test_set_is_refused(same_object):
    with pytest.raises(ConfigError, match=r"ValidationIsTest's validation dataset is its test dataset"):
        DataModuleSource(ValidationIsTest(same_object)).load(0)


class WritersDataset(TensorDataset):
    """Blobs with a natural client id per example."""

    def __init__(self, base: TensorDataset) -> None:
        super().__init__(*base.tensors)
        self.client_ids = np.arange(len(base)) % 4


class TrainHasClientIds(BlobsDataModule):
    def setup(self, stage: str) -> None:
        super().setup(stage)
        self.train = WritersDataset(self.train)


def test_client_ids_of_the_training_set_are_read_though_the_validation_set_has_none():
    splits = DataModuleSource(TrainHasClientIds()).load(0)
    assert splits.train_client_ids.tolist() == [i % 4 for i in range(240)] + [-1] * 30


class ValidationFrom(BlobsDataModule):
    """A validation set made from the test or the training examples, as a user might by mistake."""

    def __init__(self, made: str) -> None:
        super().__init__()
        self.made = made

    def val_dataloader(self) -> DataLoader:
        return DataLoader(
            {
                "copy_of_test": lambda: TensorDataset(*(t.clone() for t in self.test.tensors)),
                "subset_of_test": lambda: Subset(self.test, [5, 7, 9]),
                "rows_of_test": lambda: TensorDataset(*(t[10:20].clone() for t in self.test.tensors)),
                "subset_of_train": lambda: Subset(self.train, range(30)),
                "own": lambda: self.val,
            }[self.made]()
        )


@pytest.mark.parametrize("made", ["copy_of_test", "subset_of_test", "rows_of_test"])
def test_a_validation_set_of_test_examples_is_refused_whatever_object_holds_them(made):
    with pytest.raises(ConfigError, match=r"ValidationFrom's validation dataset is its test dataset"):
        DataModuleSource(ValidationFrom(made)).load(0)


def test_a_validation_set_of_training_examples_is_warned_about_and_an_own_one_is_not(recwarn):
    DataModuleSource(ValidationFrom("subset_of_train")).load(0)
    assert [str(w.message) for w in recwarn if "validation examples are training examples" in str(w.message)]
    recwarn.clear()
    DataModuleSource(ValidationFrom("own")).load(0)
    assert not [w for w in recwarn if "validation" in str(w.message)]


class BrokenSetup(BlobsDataModule):
    def setup(self, stage: str) -> None:
        raise ValueError("no such file: /data/blobs.npz\n(check the path)")


def test_an_error_in_the_users_own_setup_is_one_line_naming_the_module(tmp_path, capsys):
    with pytest.raises(
        ConfigError,
        match=r"^BrokenSetup.setup\('fit'\) raised ValueError: no such file: "
        r"/data/blobs.npz \(check the path\)$",
    ) as raised:
        DataModuleSource(BrokenSetup()).load(0)
    assert isinstance(raised.value.__cause__, ValueError)  # the user's traceback is kept as the cause


class Empty(BlobsDataModule):
    def __init__(self, part: str) -> None:
        super().__init__()
        self.part = part

    def setup(self, stage: str) -> None:
        super().setup(stage)
        setattr(self, self.part.removesuffix("_shuffled"), blobs(0, 3))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, shuffle=self.part == "train_shuffled")


@pytest.mark.parametrize(
    "part, message",
    [
        ("train", "Empty has no training examples: check its settings"),
        ("test", "Empty has no test examples: check its settings"),
        ("train_shuffled", r"Empty.train_dataloader\(\) raised ValueError: num_samples should be a positive integer"),
    ],
)
def test_a_dataset_without_training_or_test_examples_is_refused_before_training(tmp_path, part, message):
    data = FederatedDataModule(DataModuleSource(Empty(part)), IIDPartitioner(2))
    with pytest.raises(ConfigError, match=f"^{message}"):
        small_trainer(tmp_path, rounds=1, clients_per_round=2).fit(SmallCNN(width=8), data, FedAvg())
    assert not list(tmp_path.iterdir())
