"""A file-backed map-style dataset for tests: digits written one .npy file per example, read one file per item."""

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from lightfed.data import Digits


class NpyFolder(Dataset):
    """``<root>/<i>.npy`` holds example i's image; ``<root>/targets.npy`` the labels (the ``targets`` attribute)."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.targets = np.load(self.root / "targets.npy")

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(np.load(self.root / f"{index}.npy")), int(self.targets[index])


def write_digits(root: Path, num_train: int, num_test: int) -> tuple[Path, Path]:
    """The first examples of Digits' seed-0 train and test splits, as the files of two NpyFolders."""
    splits = Digits().load(seed=0)
    folders = []
    for name, x, y in (
        ("train", splits.train_x[:num_train], splits.train_y[:num_train]),
        ("test", splits.test_x[:num_test], splits.test_y[:num_test]),
    ):
        folder = root / name
        folder.mkdir(parents=True)
        for index, image in enumerate(x.numpy()):
            np.save(folder / f"{index}.npy", image)
        np.save(folder / "targets.npy", y.numpy())
        folders.append(folder)
    return folders[0], folders[1]
