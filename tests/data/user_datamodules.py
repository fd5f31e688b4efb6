"""LightningDataModules as a user writes them: none gives its datasets a ``targets`` attribute."""

import lightning as L
import torch
import torchvision
from torch.utils.data import DataLoader, Dataset, TensorDataset, random_split


def blobs(num: int, seed: int) -> TensorDataset:
    """``num`` 1x8x8 images of 3 classes whose mean is the label."""
    generator = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (num,), generator=generator)
    return TensorDataset(torch.randn(num, 1, 8, 8, generator=generator) + y.view(-1, 1, 1, 1), y)


class BlobsDataModule(L.LightningDataModule):
    """Train, validation and test sets as TensorDatasets; counts its prepare_data and setup calls."""

    def __init__(self, num_train: int = 240, with_val: bool = True) -> None:
        super().__init__()
        self.num_train, self.with_val = num_train, with_val
        self.calls: list[str] = []

    def prepare_data(self) -> None:
        self.calls.append("prepare_data")

    def setup(self, stage: str) -> None:
        self.calls.append(f"setup:{stage}")
        self.train, self.val, self.test = blobs(self.num_train, 0), blobs(30, 1), blobs(60, 2)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=16, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        if not self.with_val:
            return super().val_dataloader()
        return DataLoader(self.val, batch_size=16)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test, batch_size=16)


class FakeImages(L.LightningDataModule):
    """torchvision's FakeData (no ``targets`` attribute) with a ToTensor transform, train split by random_split."""

    def __init__(self, size: int = 200, num_classes: int = 4) -> None:
        super().__init__()
        self.size, self.num_classes = size, num_classes

    def setup(self, stage: str) -> None:
        transform = torchvision.transforms.ToTensor()
        full = torchvision.datasets.FakeData(self.size, (1, 8, 8), self.num_classes, transform, random_offset=0)
        self.train, self.val = random_split(full, [0.9, 0.1], generator=torch.Generator().manual_seed(0))
        self.test = torchvision.datasets.FakeData(50, (1, 8, 8), self.num_classes, transform, random_offset=self.size)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=8)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test, batch_size=8)


class DictExamples(Dataset):
    """Examples as dicts ``{"x": ..., "label": ...}``."""

    def __init__(self, base: TensorDataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> dict:
        x, y = self.base[index]
        return {"x": x, "label": y}


class DictBlobs(BlobsDataModule):
    """Blobs whose examples are dicts."""

    def setup(self, stage: str) -> None:
        super().setup(stage)
        self.train, self.test = DictExamples(self.train), DictExamples(self.test)
