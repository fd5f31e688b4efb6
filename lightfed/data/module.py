"""FederatedDataModule: a dataset, its split across clients, a central test set, and batches on the device."""

from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

from lightfed.data.augmentation import Augmentation
from lightfed.data.datasets import DatasetSource, DatasetSplits, Digits, TensorSplits
from lightfed.data.loader_batches import LoaderBatches
from lightfed.data.partitioners import Partitioner
from lightfed.data.tensor_batches import Batch, TensorBatches
from lightfed.errors import ConfigError


class FederatedDataModule:
    """Dataset + partitioner + central test split.

    In-memory datasets are batched by gathering tensors by index (no DataLoader), on the accelerator when
    ``on_device``; map-style datasets (``MapDataset``) are read through DataLoaders. Training batches (never evaluation
    batches) go through ``augmentation`` on the device.
    """

    def __init__(
        self,
        dataset: DatasetSource | None = None,
        partitioner: Partitioner | None = None,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        on_device: bool = True,
        augmentation: Augmentation | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
    ) -> None:
        """
        Args:
            dataset: Where the examples come from; null: a new ``Digits()`` (scikit-learn's digits, embedded).
            partitioner: How the training examples are split across clients; leave unset for naturally federated
                datasets (e.g. Synthetic).
            batch_size: Local training batch size.
            eval_batch_size: Batch size for evaluation passes.
            on_device: Keep in-memory data on the accelerator (fastest when it fits in its memory).
            augmentation: Random crop, flip and v2 transforms applied to each training batch on the device.
            num_workers: DataLoader worker processes reading a map-style dataset (0: read in this process).
            pin_memory: Read a map-style dataset's batches into pinned memory (faster copies to a GPU).
        """
        if batch_size < 1 or eval_batch_size < 1:
            raise ConfigError(f"data.batch_size and data.eval_batch_size must be >= 1, got {batch_size}, {eval_batch_size}")
        if num_workers < 0:
            raise ConfigError(f"data.num_workers must be >= 0, got {num_workers}")
        self.dataset = Digits() if dataset is None else dataset
        self.partitioner = partitioner
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.on_device = on_device
        self.augmentation = augmentation
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.num_classes = 0
        self._batches: TensorBatches | LoaderBatches | None = None
        self._client_indices: list[Tensor] = []

    def setup(self, seed: int, device: torch.device) -> None:
        """Loads the dataset and splits it across clients, deterministically from ``seed``."""
        splits = self.dataset.load(seed)
        indices = self._partition(splits, seed)
        self.device = device
        self.num_classes = splits.num_classes
        if isinstance(splits, TensorSplits):
            self._batches = TensorBatches(
                splits, indices, self.batch_size, self.eval_batch_size, device, self.on_device
            )
        else:
            self._batches = LoaderBatches(
                splits, indices, self.batch_size, self.eval_batch_size, device, self.num_workers, self.pin_memory
            )
        self._client_indices = self._batches.client_indices

    def _partition(self, splits: TensorSplits | DatasetSplits, seed: int) -> list[np.ndarray]:
        """The partitioner's split of the training examples, or the dataset's own; refuses empty clients."""
        name = type(self.dataset).__name__
        if splits.client_indices is not None and self.partitioner is not None:
            raise ConfigError(f"{name} is already split across clients; remove data.partitioner")
        if splits.client_indices is None and self.partitioner is None:
            raise ConfigError(f"{name} needs data.partitioner (e.g. lightfed.data.DirichletPartitioner)")
        if splits.client_indices is None:
            return self.partitioner.partition(splits.train_labels, seed, splits.train_client_ids)  # refuses empties
        empty = [client_id for client_id, client in enumerate(splits.client_indices) if len(client) == 0]
        if empty:
            raise ConfigError(f"{name} gives client {empty[0]} no training examples")
        return splits.client_indices

    @property
    def num_clients(self) -> int:
        return len(self._client_indices)

    def client_size(self, client_id: int) -> int:
        return len(self._client_indices[client_id])

    @property
    def train_x(self) -> Tensor:
        """An in-memory dataset's training features (on the device when ``on_device``)."""
        return self._batches.train_x

    @property
    def train_y(self) -> Tensor:
        """An in-memory dataset's training labels."""
        return self._batches.train_y

    @property
    def test_x(self) -> Tensor:
        """An in-memory dataset's test features."""
        return self._batches.test_x

    @property
    def test_y(self) -> Tensor:
        """An in-memory dataset's test labels."""
        return self._batches.test_y

    def client_batches(
        self, client_id: int, generator: torch.Generator, epochs: int | None = None, steps: int | None = None
    ) -> Iterator[Batch]:
        """Shuffled (and augmented) batches of one client's data: ``epochs`` passes, or exactly ``steps`` batches."""
        batches = self._batches.client_batches(client_id, generator, epochs, steps)
        return batches if self.augmentation is None else (self._augmented(batch, generator) for batch in batches)

    def client_subset(self, client_id: int, positions: Tensor, generator: torch.Generator | None = None) -> Batch:
        """The examples at ``positions`` (0 .. client_size - 1) of one client's data, e.g. a Poisson sample; augmented
        with ``generator`` (None: torch's global RNG)."""
        batch = self._batches.client_subset(client_id, positions)
        return batch if self.augmentation is None else self._augmented(batch, generator)

    def test_batches(self, rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
        """Batches of this process's contiguous share of the central test set."""
        return self._batches.test_batches(rank, world_size)

    def client_eval_batches(self, client_id: int) -> Iterator[Batch]:
        """Batches of one client's own examples, in order, for per-client evaluation."""
        return self._batches.client_eval_batches(client_id)

    def _augmented(self, batch: Batch, generator: torch.Generator | None) -> Batch:
        """The batch with its first element (the images) augmented."""
        if not isinstance(batch, (tuple, list)) or not isinstance(batch[0], Tensor) or batch[0].ndim != 4:
            raise ConfigError("data.augmentation needs batches (images, ...) whose images are (batch, C, H, W)")
        images, *rest = batch
        return (self.augmentation(images, generator), *rest)
