"""Dataset sources: these load a whole dataset into memory as tensors (``MapDataset`` reads examples on demand)."""

from abc import ABC, abstractmethod
from collections.abc import Sized
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, cast

import numpy as np
import torch
import torchvision
from torch.utils.data import Dataset

from lightfed.errors import ConfigError, DatasetNotFoundError


@dataclass(frozen=True)
class TensorSplits:
    """A dataset held in memory: features float32, labels int64, and an optional natural client partition.

    `train_client_ids` gives each training example a natural client id (e.g. its writer), for `NaturalIdPartitioner`.
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    client_indices: list[np.ndarray] | None = None
    train_client_ids: np.ndarray | None = None

    @property
    def train_labels(self) -> np.ndarray:
        return self.train_y.numpy()

    @property
    def num_train(self) -> int:
        return len(self.train_y)


@dataclass(frozen=True)
class DatasetSplits:
    """Map-style datasets read on demand; the training labels (for partitioners) and client ids when known.

    `val_indices`: the examples of `train` that are the dataset's own validation set (never given to a client).
    """

    train: Dataset
    test: Dataset
    num_classes: int
    train_labels: np.ndarray | None = None
    train_client_ids: np.ndarray | None = None
    client_indices: list[np.ndarray] | None = None
    val_indices: np.ndarray | None = None

    @property
    def num_train(self) -> int:
        return size(self.train)


def size(dataset: Dataset) -> int:
    """The number of examples of a map-style dataset (torch's ``Dataset`` type does not declare its ``__len__``)."""
    return len(cast(Sized, dataset))


class DatasetSource(ABC):
    """Where the examples come from; `load(seed)` returns them as tensors or as map-style datasets."""

    @abstractmethod
    def load(self, seed: int) -> TensorSplits | DatasetSplits:
        """Return the train and test examples; anything random depends only on `seed`."""


def _check_fraction(test_fraction: float) -> None:
    if not 0.0 < test_fraction < 1.0:
        raise ConfigError(f"test_fraction must be between 0 and 1 (exclusive), got {test_fraction}")


class Digits(DatasetSource):
    """scikit-learn's 8x8 handwritten digits (1797 images, 10 classes), no download needed."""

    def __init__(self, test_fraction: float = 0.2) -> None:
        """
        Args:
            test_fraction: Share of the examples held out as the test set (stratified by label).
        """
        _check_fraction(test_fraction)
        self.test_fraction = test_fraction

    def load(self, seed: int) -> TensorSplits:
        """Images (N, 1, 8, 8) in [0, 1]; the train/test split depends on `seed`."""
        from sklearn.datasets import load_digits  # scikit-learn only where its digits are used
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        x = (digits.data / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)
        y = digits.target.astype(np.int64)
        train_x, test_x, train_y, test_y = train_test_split(
            x, y, test_size=self.test_fraction, random_state=seed, stratify=y
        )
        return TensorSplits(
            train_x=torch.from_numpy(train_x),
            train_y=torch.from_numpy(train_y),
            test_x=torch.from_numpy(test_x),
            test_y=torch.from_numpy(test_y),
            num_classes=10,
        )


class Synthetic(DatasetSource):
    """FedProx's Synthetic(alpha, beta) data (Li et al. 2020, section 5.1), naturally split across clients.

    Client k draws u_k ~ N(0, alpha), W_k, b_k ~ N(u_k, 1), B_k ~ N(0, beta), v_k ~ N(B_k, 1);
    its examples are x ~ N(v_k, Sigma) with Sigma_jj = j^-1.2 and y = argmax(W_k x + b_k).
    As in FedProx's generate_synthetic.py, alpha and beta are standard deviations and
    client sizes are int(lognormal(4, 2)) + 50. With `iid`, all clients share W, b ~ N(0, 1)
    and the mean v ~ N(0, 1), and alpha and beta are unused. As in the original, u_k adds the
    same amount to every logit, so alpha leaves the labels unchanged; beta drives the skew.
    """

    def __init__(
        self,
        alpha: float = 1.0,
        beta: float = 1.0,
        num_clients: int = 30,
        dim: int = 60,
        num_classes: int = 10,
        test_fraction: float = 0.2,
        iid: bool = False,
    ) -> None:
        """
        Args:
            alpha: How much the clients' models differ (std of u_k).
            beta: How much the clients' inputs differ (std of B_k).
            num_clients: Number of clients to generate.
            dim: Number of features.
            num_classes: Number of classes.
            test_fraction: Share of each client's examples that goes to the central test set.
            iid: Give every client the same model and input distribution.
        """
        if alpha < 0 or beta < 0:
            raise ConfigError(f"alpha and beta must be >= 0, got alpha={alpha}, beta={beta}")
        if num_clients < 1:
            raise ConfigError(f"num_clients must be >= 1, got {num_clients}")
        if dim < 1:
            raise ConfigError(f"dim must be >= 1, got {dim}")
        if num_classes < 2:
            raise ConfigError(f"num_classes must be >= 2, got {num_classes}")
        _check_fraction(test_fraction)
        self.alpha = alpha
        self.beta = beta
        self.num_clients = num_clients
        self.dim = dim
        self.num_classes = num_classes
        self.test_fraction = test_fraction
        self.iid = iid

    def load(self, seed: int) -> TensorSplits:
        """Features (N, dim); `client_indices` holds each client's rows of `train_x`."""
        rng = np.random.default_rng(seed)
        sizes = rng.lognormal(4, 2, self.num_clients).astype(int) + 50
        std_x = np.arange(1, self.dim + 1) ** -0.6  # sqrt of Sigma_jj = j^-1.2
        shared = self._client_model(rng, 0.0, 0.0) if self.iid else None
        train_x, train_y, test_x, test_y, client_indices = [], [], [], [], []
        start = 0
        for size in sizes:
            w, b, v = shared if shared is not None else self._client_model(rng, self.alpha, self.beta)
            x = v + rng.standard_normal((size, self.dim)) * std_x
            y = np.argmax(x @ w + b, axis=1)  # argmax of softmax(logits) is argmax of logits
            num_test = min(size - 1, max(1, round(size * self.test_fraction)))
            num_train = size - num_test
            train_x.append(x[:num_train])
            train_y.append(y[:num_train])
            test_x.append(x[num_train:])
            test_y.append(y[num_train:])
            client_indices.append(np.arange(start, start + num_train, dtype=np.int64))
            start += num_train
        return TensorSplits(
            train_x=torch.from_numpy(np.concatenate(train_x).astype(np.float32)),
            train_y=torch.from_numpy(np.concatenate(train_y).astype(np.int64)),
            test_x=torch.from_numpy(np.concatenate(test_x).astype(np.float32)),
            test_y=torch.from_numpy(np.concatenate(test_y).astype(np.int64)),
            num_classes=self.num_classes,
            client_indices=client_indices,
        )

    def _client_model(
        self, rng: np.random.Generator, alpha: float, beta: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw one client's W (dim, classes), b (classes) and input mean v (dim)."""
        u = rng.normal(0, alpha)
        w = rng.normal(u, 1, (self.dim, self.num_classes))
        b = rng.normal(u, 1, self.num_classes)
        v = rng.normal(rng.normal(0, beta), 1, self.dim)
        return w, b, v


class _TorchvisionSource(DatasetSource):
    """An image dataset read with torchvision, normalised per channel, as (N, C, H, W) tensors."""

    dataset_class: ClassVar[type]
    folder: ClassVar[str]  # where torchvision keeps the files, relative to root
    files: ClassVar[str]  # the files expected in `folder`, for the error message
    mean: ClassVar[tuple[float, ...]]
    std: ClassVar[tuple[float, ...]]
    num_classes: ClassVar[int]

    def __init__(self, root: str = "data", download: bool = False) -> None:
        """
        Args:
            root: Folder holding the dataset files (torchvision's layout).
            download: Download the files into `root` when they are missing.
        """
        self.root = root
        self.download = download

    def load(self, seed: int) -> TensorSplits:
        """The dataset's own train and test sets; `seed` is unused."""
        root = Path(self.root).expanduser().resolve()
        try:
            train = self.dataset_class(root, train=True, download=self.download)
            test = self.dataset_class(root, train=False, download=self.download)
        except RuntimeError:
            fix = "check the network or copy them there" if self.download else "pass download=True or copy them there"
            raise DatasetNotFoundError(
                f"{type(self).__name__} files missing or corrupted in {root / self.folder} "
                f"(expected {self.files}); {fix}"
            ) from None
        train_x, train_y = self._to_tensors(train.data, train.targets)
        test_x, test_y = self._to_tensors(test.data, test.targets)
        return TensorSplits(train_x, train_y, test_x, test_y, num_classes=self.num_classes)

    def _to_tensors(
        self, data: np.ndarray | torch.Tensor, targets: list[int] | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 images (N, H, W) or (N, H, W, C) -> normalised float32 (N, C, H, W); targets -> int64."""
        images = torch.as_tensor(data)
        images = images.unsqueeze(1) if images.ndim == 3 else images.permute(0, 3, 1, 2)
        mean = torch.tensor(self.mean).view(1, -1, 1, 1)
        std = torch.tensor(self.std).view(1, -1, 1, 1)
        x = images.contiguous().float().div_(255).sub_(mean).div_(std)
        return x, torch.as_tensor(targets, dtype=torch.int64)


class CIFAR10(_TorchvisionSource):
    """CIFAR-10: 32x32 colour images, 10 classes, 50000 train and 10000 test."""

    dataset_class = torchvision.datasets.CIFAR10
    folder = "cifar-10-batches-py"
    files = "data_batch_1..5, test_batch, batches.meta"
    mean = (0.4914, 0.4822, 0.4465)
    std = (0.2470, 0.2435, 0.2616)
    num_classes = 10


class CIFAR100(_TorchvisionSource):
    """CIFAR-100: 32x32 colour images, 100 fine classes, 50000 train and 10000 test."""

    dataset_class = torchvision.datasets.CIFAR100
    folder = "cifar-100-python"
    files = "train, test, meta"
    mean = (0.5071, 0.4865, 0.4409)
    std = (0.2673, 0.2564, 0.2762)
    num_classes = 100


class MNIST(_TorchvisionSource):
    """MNIST: 28x28 grey handwritten digits, 10 classes, 60000 train and 10000 test."""

    dataset_class = torchvision.datasets.MNIST
    folder = "MNIST/raw"
    files = "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte"
    mean = (0.1307,)
    std = (0.3081,)
    num_classes = 10


class FashionMNIST(_TorchvisionSource):
    """Fashion-MNIST: 28x28 grey clothing images, 10 classes, 60000 train and 10000 test."""

    dataset_class = torchvision.datasets.FashionMNIST
    folder = "FashionMNIST/raw"
    files = MNIST.files
    mean = (0.2860,)
    std = (0.3530,)
    num_classes = 10
