"""A LightningDataModule as a dataset source: its train, validation and test datasets, split across clients."""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from lightning import LightningDataModule
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.fabric.utilities.rank_zero import rank_zero_warn
from torch.utils.data import ConcatDataset, DataLoader, Dataset, Subset

from lightfed.data.datasets import DatasetSource, DatasetSplits, size
from lightfed.data.overlap import contained
from lightfed.errors import ConfigError, LightfedError
from lightfed.user_modules import check_own_code

LABEL_NAMES = ("label", "labels", "target", "targets", "y")  # where a dict example's label is found by name


class DataModuleSource(DatasetSource):
    """A ``LightningDataModule``: lightfed calls ``prepare_data`` and ``setup`` and reads the datasets of its
    ``train_dataloader``, ``val_dataloader`` and ``test_dataloader`` (with their transforms).

    The training dataset is split across clients; the validation dataset, where the module has one, is the validation
    split (else ``data.val_fraction`` of the training examples is held out); the test dataset (else the validation
    dataset) is the central test set. Label-based partitioners read the training labels from ``label_key``, else a
    ``targets`` or ``labels`` attribute of the dataset (through ``Subset`` and ``ConcatDataset``), else one pass over
    the examples (their second element, or a dict's ``label``), done once. ``data.dataset`` may name the module itself;
    this class is for ``label_key``, ``find_labels`` and ``num_classes``.

    In a config (``mine.py`` beside the config file):

    ```yaml
    data:
      dataset:
        class_path: lightfed.data.DataModuleSource
        init_args:
          datamodule: {class_path: mine.Blobs}
          label_key: label
    ```

    Examples:
        >>> import torch
        >>> from lightning import LightningDataModule
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> from lightfed.data import DataModuleSource
        >>> class Blobs(LightningDataModule):
        ...     def setup(self, stage):
        ...         x = torch.arange(12.0).view(6, 2)
        ...         self.train, self.test = TensorDataset(x[:4], torch.tensor([0, 1, 1, 0])), TensorDataset(x[4:])
        ...     def train_dataloader(self):
        ...         return DataLoader(self.train)
        ...     def test_dataloader(self):
        ...         return DataLoader(self.test)
        >>> splits = DataModuleSource(Blobs()).load(seed=0)
        >>> splits.num_train, splits.num_test, splits.train_labels  # the labels found by one pass
        (4, 2, array([0, 1, 1, 0]))
        >>> DataModuleSource(Blobs(), label_key=3).load(seed=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: label_key 3 does not give the labels of Blobs's examples (tuple index out of range);
        name the position or key that holds each example's label
    """

    def __init__(
        self,
        datamodule: LightningDataModule,
        label_key: Callable[[Any], Any] | int | str | None = None,
        find_labels: bool = True,
        num_classes: int | None = None,
    ) -> None:
        """
        Args:
            datamodule: The module whose datasets are read.
            label_key: Where an example holds its label: a position (tuple examples), a key (dict examples) or a
                function of the example; null: a ``targets``/``labels`` attribute, else found by one pass.
            find_labels: Read the examples once to find their labels when no attribute gives them (false: no
                labels, e.g. for ``IIDPartitioner`` on a dataset whose examples are slow to read).
            num_classes: Number of classes; null: the module's ``num_classes`` attribute, else the largest label + 1.
        """
        if callable(label_key):
            check_own_code("label_key", label_key, "every example", "a position, a key, or a function of your own")
        self.datamodule = datamodule
        self.label_key = label_key
        self.find_labels = find_labels
        self.num_classes = num_classes
        self._splits: DatasetSplits | None = None

    @property
    def name(self) -> str:
        return type(self.datamodule).__name__

    def load(self, seed: int) -> DatasetSplits:
        """The module's datasets, prepared and set up once; each ``setup`` draws from torch's random stream seeded
        by ``seed`` (so a ``random_split`` in ``setup`` splits alike for both stages), the run's own stream untouched."""
        if self._splits is None:
            with torch.random.fork_rng(devices=[]):
                self._splits = self._read(seed)
        return self._splits

    def _read(self, seed: int) -> DatasetSplits:
        torch.manual_seed(seed)
        self._call("prepare_data")
        torch.manual_seed(seed)
        self._call("setup", "fit")
        train = self._dataset("train_dataloader")
        if train is None:
            raise ConfigError(f"{self.name} has no train_dataloader; define one that returns a DataLoader")
        torch.manual_seed(seed)
        self._call("setup", "test")
        val = self._dataset("val_dataloader")  # after both setups, to be compared with the test set
        test = self._dataset("test_dataloader")
        if test is None:
            if val is None:
                raise ConfigError(
                    f"{self.name} has neither test_dataloader nor val_dataloader; define one for the test set"
                )
            test, val = val, None
        if val is not None and contained(val, test):
            raise ConfigError(
                f"{self.name}'s validation dataset is its test dataset (its examples are test examples), so the best "
                "round would be chosen on the test set; give val_dataloader other examples, or make it raise "
                "(lightfed then holds out data.val_fraction of the training set)"
            )
        if val is not None and contained(val, train):
            rank_zero_warn(
                f"{self.name}'s validation examples are training examples: the best round is chosen on data the "
                "clients train on"
            )
        labels = self._labels(train)
        client_ids = _attribute(train, ("client_ids",))
        val_indices = None
        if val is not None:
            val_indices = np.arange(size(train), size(train) + size(val))
            if labels is not None:  # the validation examples are never partitioned: no pass reads their labels
                labels = np.concatenate([labels, np.full(size(val), -1)])
            if client_ids is not None:  # nor their client ids
                client_ids = np.concatenate([client_ids, np.full(size(val), -1)])
            train = ConcatDataset([train, val])
        num_classes = self.num_classes or getattr(self.datamodule, "num_classes", None)
        if not isinstance(num_classes, int):
            num_classes = int(labels.max()) + 1 if labels is not None and len(labels) else 0
        return DatasetSplits(train, test, num_classes, labels, client_ids, val_indices=val_indices)

    def _call(self, hook: str, *args: Any) -> Any:
        """The module's own ``hook``; an error it raises is named in one line with its module (the cause kept)."""
        try:
            return getattr(self.datamodule, hook)(*args)
        except LightfedError:
            raise
        except Exception as error:
            message = " ".join(str(error).split())
            called = f"{self.name}.{hook}({', '.join(map(repr, args))})"
            raise ConfigError(f"{called} raised {type(error).__name__}: {message}") from error

    def _dataset(self, hook: str) -> Dataset | None:
        """The dataset of the module's ``hook`` DataLoader; None where the module does not define the hook."""
        try:
            loader = self._call(hook)
        except ConfigError as error:
            if isinstance(
                error.__cause__, MisconfigurationException
            ):  # LightningDataModule's own: "must be implemented"
                return None
            raise
        if not isinstance(loader, DataLoader):
            raise ConfigError(f"{self.name}.{hook} must return one DataLoader, got {type(loader).__name__}")
        return loader.dataset

    def _labels(self, dataset: Dataset) -> np.ndarray | None:
        """One label per example: from ``label_key``, an attribute, or one pass; None where none gives them."""
        if self.label_key is None:
            labels = _attribute(dataset, ("targets", "labels"))
            if labels is not None or not self.find_labels:
                return labels
            try:
                return _as_labels([_found_label(dataset[i]) for i in range(size(dataset))])
            except (LookupError, TypeError, ValueError):
                return None
        key = self.label_key
        try:
            return _as_labels([key(dataset[i]) if callable(key) else dataset[i][key] for i in range(size(dataset))])
        except (LookupError, TypeError, ValueError) as error:
            raise ConfigError(
                f"label_key {key!r} does not give the labels of {self.name}'s examples ({error}); "
                "name the position or key that holds each example's label"
            ) from None


def _attribute(dataset: Dataset, names: Sequence[str]) -> np.ndarray | None:
    """The first of the attributes ``names`` the dataset has (through ``Subset`` and ``ConcatDataset``), one entry per
    example; None where it has none."""
    if isinstance(dataset, Subset):
        values = _attribute(dataset.dataset, names)
        return None if values is None else values[np.asarray(dataset.indices)]
    if isinstance(dataset, ConcatDataset):
        parts = [_attribute(part, names) for part in dataset.datasets]
        return None if any(part is None for part in parts) else np.concatenate(parts)  # type: ignore[arg-type]
    for name in names:
        values = getattr(dataset, name, None)
        if values is not None and not callable(values):
            values = np.asarray(values.numpy() if isinstance(values, torch.Tensor) else values)
            if values.ndim == 1 and len(values) == size(dataset):
                return values
    return None


def _found_label(example: Any) -> Any:
    """An example's label by convention: the second element of a tuple, a dict's ``label`` (or a similar name)."""
    if isinstance(example, dict):
        for name in LABEL_NAMES:
            if name in example:
                return example[name]
        raise KeyError("a dict example has none of the keys " + ", ".join(LABEL_NAMES))
    if isinstance(example, (tuple, list)) and len(example) >= 2:
        return example[1]
    raise TypeError("the example is neither a tuple (input, label) nor a dict with a label")


def _as_labels(values: list[Any]) -> np.ndarray:
    """Scalar labels as an int64 array (anything but an integer scalar is refused with ValueError)."""
    labels = []
    for value in values:
        if isinstance(value, torch.Tensor):
            if value.numel() != 1 or value.is_floating_point():
                raise ValueError(f"a label is a tensor of shape {tuple(value.shape)} ({value.dtype})")
            value = value.item()
        if isinstance(value, np.generic):
            value = value.item()
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"a label is {type(value).__name__}, not an integer")
        labels.append(value)
    return np.asarray(labels, dtype=np.int64)
