"""Batches read from map-style datasets through DataLoaders and moved to the device."""

import math
import multiprocessing
import pickle
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, default_collate

from lightfed.data.client_groups import ClientGroups
from lightfed.data.datasets import DatasetSplits, size
from lightfed.errors import ConfigError
from lightfed.user_modules import UserModules, installed

_END = object()


def worker_context() -> multiprocessing.context.BaseContext:
    """How DataLoader workers start: forked by a fork server (a process started once, that imports torch and
    lightfed and runs no other thread) where the platform has one, else spawned. Never forked from this process: a
    lock another of its threads held at the fork would stay held in the worker for ever."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    from multiprocessing import forkserver  # POSIX only

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    forkserver.ensure_running()  # starts it now, so that its imports overlap this process's work
    return context


class WorkerDataset(Dataset):
    """``dataset`` as a worker reads it. Unpickling it installs the finder of the user's modules (of the run) first,
    so that a worker started afresh resolves the user's classes as this process does."""

    def __init__(self, finder: UserModules | None, dataset: Dataset) -> None:
        self.finder, self.dataset = finder, dataset

    def __reduce__(self) -> tuple[type, tuple[UserModules | None, Dataset]]:
        return WorkerDataset, (self.finder, self.dataset)  # the finder's state comes first in the pickle

    def __len__(self) -> int:
        return size(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        read = getattr(self.dataset, "__getitems__", None)
        return read(indices) if read else [self.dataset[index] for index in indices]


class LoaderBatches:
    """One federation's batches from map-style datasets, read on demand (``num_workers`` worker processes).

    A client's passes are shuffled with a ``torch.Generator`` seeded from the client's generator, which also seeds the
    workers, so the batches depend only on the client's seed (not on ``num_workers``). Each pass starts its workers
    afresh (``worker_context``); the datasets must pickle. ``client_indices``,
    ``val_indices`` (the validation split) and ``client_eval_indices`` (what per-client evaluation reads) index
    ``splits.train``. Clients trained in parallel threads read the datasets one batch at a time (``_reading``), so a
    dataset's ``__getitem__`` need not be thread-safe (NumPy's ``np.load`` is not on CPython 3.11).
    """

    def __init__(
        self,
        splits: DatasetSplits,
        client_indices: Sequence[np.ndarray],
        val_indices: np.ndarray,
        client_eval_indices: Sequence[np.ndarray],
        batch_size: int,
        eval_batch_size: int,
        device: torch.device,
        num_workers: int,
        pin_memory: bool,
    ) -> None:
        self.train, self.test = splits.train, splits.test
        self._context = None
        if num_workers > 0:
            finder = installed()
            self.train, self.test = WorkerDataset(finder, self.train), WorkerDataset(finder, self.test)
            _check_pickles(self.train, self.test)
            self._context = worker_context()
        self.device = device
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory and device.type == "cuda"
        self.client_indices = ClientGroups.of(client_indices).to_tensor("cpu")
        self.val_indices = torch.as_tensor(np.asarray(val_indices), dtype=torch.long)
        self.client_eval_indices = (
            self.client_indices
            if client_eval_indices is client_indices
            else ClientGroups.of(client_eval_indices).to_tensor("cpu")
        )
        self._reading = threading.Lock()

    def client_batches(
        self, client_id: int, generator: torch.Generator, epochs: int | None = None, steps: int | None = None
    ) -> Iterator[Any]:
        """Shuffled batches of one client's data: ``epochs`` passes, or exactly ``steps`` batches."""
        indices = self.client_indices[client_id]
        shuffle = torch.Generator().manual_seed(int(torch.randint(2**62, (), generator=generator)))
        passes = epochs if steps is None else math.ceil(steps / math.ceil(len(indices) / self.batch_size))
        assert passes is not None, "a client trains for epochs or for steps"
        batches = [
            chunk.tolist()
            for _ in range(passes)
            for chunk in indices[torch.randperm(len(indices), generator=shuffle)].split(self.batch_size)
        ]
        yield from self._load(self.train, batches[:steps], shuffle)

    def client_subset(self, client_id: int, positions: Tensor) -> Any:
        """The examples at ``positions`` (0 .. client_size - 1) of one client's data, read in this process."""
        indices = self.client_indices[client_id]
        with self._reading:
            examples = [self.train[i] for i in indices[positions.cpu()].tolist()]
        if not examples:  # an empty batch shaped like one example
            first = self.client_subset(client_id, torch.zeros(1, dtype=torch.long))
            return apply_to_collection(first, Tensor, lambda t: t[:0])
        return move_data_to_device(default_collate(examples), self.device)

    def test_batches(self, rank: int = 0, world_size: int = 1) -> Iterator[Any]:
        """Batches of this process's contiguous share of the central test set."""
        yield from self._load(self.test, self._share(torch.arange(size(self.test)), rank, world_size))

    def val_batches(self, rank: int = 0, world_size: int = 1) -> Iterator[Any]:
        """Batches of this process's contiguous share of the validation split."""
        yield from self._load(self.train, self._share(self.val_indices, rank, world_size))

    def client_eval_batches(self, client_id: int) -> Iterator[Any]:
        """Batches of the examples per-client evaluation reads for one client, in order."""
        yield from self._load(self.train, self._share(self.client_eval_indices[client_id], 0, 1))

    def _share(self, indices: torch.Tensor, rank: int, world_size: int) -> list[list[int]]:
        """Process ``rank``'s contiguous share of ``indices``, in batches of at most ``eval_batch_size``."""
        bounds = np.linspace(0, len(indices), world_size + 1).astype(int)
        return [chunk.tolist() for chunk in indices[bounds[rank] : bounds[rank + 1]].split(self.eval_batch_size)]

    def _load(
        self, dataset: Dataset, batches: list[list[int]], generator: torch.Generator | None = None
    ) -> Iterator[Any]:
        """The batches of ``dataset`` at those indices, on the device; ``generator`` seeds the workers."""
        loader = DataLoader(
            dataset,
            batch_sampler=batches,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            generator=generator,
            multiprocessing_context=self._context,  # no timeout: torch then checks every 5 s that the workers live
        )
        batches_read = iter(loader)
        while True:
            with self._reading:
                batch = next(batches_read, _END)
            if batch is _END:
                return
            yield move_data_to_device(batch, self.device)


def _check_pickles(*datasets: WorkerDataset) -> None:
    """Raises a ConfigError, before any pass, if a dataset cannot travel to a worker process."""
    for dataset in datasets:
        try:
            pickle.dumps(dataset)
        except Exception as error:  # pickling raises PicklingError, AttributeError or TypeError
            raise ConfigError(
                f"data.num_workers > 0 reads {type(dataset.dataset).__name__} in worker processes started afresh, so "
                f"it must pickle, but: {error}; define its functions and classes at the top of a module, or set "
                "data.num_workers 0"
            ) from None
