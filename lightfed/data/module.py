"""FederatedDataModule: a dataset, its split across clients, a central test set, and fast tensor batches."""

import math
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

from lightfed.data.datasets import DatasetSource, Digits
from lightfed.data.partitioners import Partitioner
from lightfed.errors import ConfigError

Batch = tuple[Tensor, Tensor]


class FederatedDataModule:
    """Dataset + partitioner + central test split.

    Batches are gathered from in-memory tensors by index (no DataLoader), on the accelerator when ``on_device``.
    """

    def __init__(
        self,
        dataset: DatasetSource | None = None,
        partitioner: Partitioner | None = None,
        batch_size: int = 32,
        eval_batch_size: int = 512,
        on_device: bool = True,
    ) -> None:
        """
        Args:
            dataset: Where the examples come from; null: a new ``Digits()`` (scikit-learn's digits, embedded).
            partitioner: How the training examples are split across clients; leave unset for naturally federated
                datasets (e.g. Synthetic).
            batch_size: Local training batch size.
            eval_batch_size: Batch size for evaluation passes.
            on_device: Keep the data on the accelerator (fastest when it fits in its memory).
        """
        if batch_size < 1 or eval_batch_size < 1:
            raise ConfigError(f"data.batch_size and data.eval_batch_size must be >= 1, got {batch_size}, {eval_batch_size}")
        self.dataset = Digits() if dataset is None else dataset
        self.partitioner = partitioner
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.on_device = on_device
        self.num_classes = 0
        self._client_indices: list[Tensor] = []

    def setup(self, seed: int, device: torch.device) -> None:
        """Loads the dataset and splits it across clients, deterministically from ``seed``."""
        splits = self.dataset.load(seed)
        if splits.client_indices is not None and self.partitioner is not None:
            raise ConfigError(f"{type(self.dataset).__name__} is already split across clients; remove data.partitioner")
        if splits.client_indices is None and self.partitioner is None:
            raise ConfigError(f"{type(self.dataset).__name__} needs data.partitioner (e.g. lightfed.data.DirichletPartitioner)")
        if splits.client_indices is None:
            indices = self.partitioner.partition(splits.train_y.numpy(), seed)  # refuses empty clients
        else:
            indices = splits.client_indices
            empty = [client_id for client_id, client in enumerate(indices) if len(client) == 0]
            if empty:
                raise ConfigError(f"{type(self.dataset).__name__} gives client {empty[0]} no training examples")
        storage = device if self.on_device else torch.device("cpu")
        self.device = device
        self.num_classes = splits.num_classes
        self.train_x, self.train_y = splits.train_x.to(storage), splits.train_y.to(storage)
        self.test_x, self.test_y = splits.test_x.to(storage), splits.test_y.to(storage)
        self._client_indices = [torch.as_tensor(np.asarray(i), dtype=torch.long, device=storage) for i in indices]

    @property
    def num_clients(self) -> int:
        return len(self._client_indices)

    def client_size(self, client_id: int) -> int:
        return len(self._client_indices[client_id])

    def client_batches(
        self, client_id: int, generator: torch.Generator, epochs: int | None = None, steps: int | None = None
    ) -> Iterator[Batch]:
        """Shuffled batches of one client's data: ``epochs`` passes, or exactly ``steps`` batches."""
        indices = self._client_indices[client_id]
        batches_per_epoch = math.ceil(len(indices) / self.batch_size)
        passes = epochs if steps is None else math.ceil(steps / batches_per_epoch)
        remaining = passes * batches_per_epoch if steps is None else steps
        for _ in range(passes):
            order = indices[torch.randperm(len(indices), generator=generator).to(indices.device)]
            for start in range(0, len(order), self.batch_size):
                if remaining == 0:
                    return
                remaining -= 1
                yield self._batch(self.train_x, self.train_y, order[start : start + self.batch_size])

    def client_subset(self, client_id: int, positions: Tensor) -> Batch:
        """The examples at ``positions`` (0 .. client_size - 1) of one client's data, e.g. a Poisson sample."""
        indices = self._client_indices[client_id]
        return self._batch(self.train_x, self.train_y, indices[positions.to(indices.device)])

    def test_batches(self, rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
        """Batches of this process's contiguous share of the central test set."""
        bounds = np.linspace(0, len(self.test_y), world_size + 1).astype(int)
        for start in range(bounds[rank], bounds[rank + 1], self.eval_batch_size):
            end = min(start + self.eval_batch_size, bounds[rank + 1])
            yield self._batch(self.test_x, self.test_y, slice(start, end))

    def client_eval_batches(self, client_id: int) -> Iterator[Batch]:
        """Batches of one client's own examples, in order, for per-client evaluation."""
        indices = self._client_indices[client_id]
        for start in range(0, len(indices), self.eval_batch_size):
            yield self._batch(self.train_x, self.train_y, indices[start : start + self.eval_batch_size])

    def _batch(self, x: Tensor, y: Tensor, index: Tensor | slice) -> Batch:
        return x[index].to(self.device, non_blocking=True), y[index].to(self.device, non_blocking=True)
