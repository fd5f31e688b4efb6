"""Map-style datasets for DataLoader worker tests, importable by a worker process as ``tests.data.worker_datasets``."""

import os
import threading

import torch
from torch.utils.data import Dataset

READING = threading.Lock()  # taken by every read of LockedReads


class LockedReads(Dataset):
    """Example i is (a row of i's, i); each read takes ``READING``, as a library's code takes its module's lock."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.targets = [i % 3 for i in range(size)]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        with READING:
            return torch.full((4,), float(index)), self.targets[index]


class ExitingReads(LockedReads):
    """Its first read ends the process that makes it, as an out-of-memory kill would."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        os._exit(1)
