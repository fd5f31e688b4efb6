"""A dataset source for any map-style torch Dataset, read example by example (e.g. from files)."""

from collections.abc import Sequence

import numpy as np
from torch.utils.data import Dataset

from lightfed.data.datasets import DatasetSource, DatasetSplits, size
from lightfed.errors import ConfigError


class MapDataset(DatasetSource):
    """Any map-style ``torch.utils.data.Dataset`` (e.g. torchvision's ``ImageFolder``), read on demand.

    Training batches come through a ``DataLoader`` (``data.num_workers``, ``data.pin_memory``) and are moved to the
    device. Partitioners split by the training labels: ``targets``, else the dataset's own ``targets`` attribute.
    ``NaturalIdPartitioner`` splits by ``client_ids``, else the dataset's own ``client_ids`` attribute.

    In a config (torchvision's ``ImageFolder`` over folders of images):

    ```yaml
    data:
      dataset:
        class_path: lightfed.data.MapDataset
        init_args:
          train: {class_path: torchvision.datasets.ImageFolder, init_args: {root: data/train}}
          test: {class_path: torchvision.datasets.ImageFolder, init_args: {root: data/test}}
      num_workers: 4
    ```

    Examples:
        >>> import torch
        >>> from torch.utils.data import TensorDataset
        >>> from lightfed.data import MapDataset
        >>> train = TensorDataset(torch.zeros(4, 2), torch.tensor([0, 1, 1, 2]))
        >>> test = TensorDataset(torch.zeros(2, 2), torch.tensor([0, 1]))
        >>> splits = MapDataset(train, test, targets=[0, 1, 1, 2]).load(seed=0)
        >>> splits.num_train, splits.num_classes, splits.train_labels
        (4, 3, array([0, 1, 1, 2]))
        >>> MapDataset(train, test, targets=[0, 1]).load(seed=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: MapDataset targets has 2 entries for 4 training examples
    """

    def __init__(
        self,
        train: Dataset,
        test: Dataset,
        targets: Sequence[int] | None = None,
        client_ids: Sequence[int | str] | None = None,
    ) -> None:
        """
        Args:
            train: The training examples, split across clients.
            test: The central test set.
            targets: The label of each training example; null: ``train.targets`` if the dataset has it.
            client_ids: A natural client id per training example (for ``NaturalIdPartitioner``); null:
                ``train.client_ids`` if the dataset has it.
        """
        self.train = train
        self.test = test
        self.targets = targets
        self.client_ids = client_ids

    def load(self, seed: int) -> DatasetSplits:
        """The datasets as given; `seed` is unused. ``num_classes`` is the largest training label + 1."""
        labels = self._per_example("targets", self.targets)
        num_classes = int(labels.max()) + 1 if labels is not None and len(labels) else 0
        client_ids = self._per_example("client_ids", self.client_ids)
        return DatasetSplits(self.train, self.test, num_classes, labels, client_ids)

    def _per_example(self, name: str, given: Sequence | None) -> np.ndarray | None:
        """``given``, else the training dataset's attribute ``name``, as an array with one entry per example."""
        values = getattr(self.train, name, None) if given is None else given
        if values is None:
            return None
        values = np.asarray(values)
        if len(values) != size(self.train):
            raise ConfigError(f"MapDataset {name} has {len(values)} entries for {size(self.train)} training examples")
        return values
