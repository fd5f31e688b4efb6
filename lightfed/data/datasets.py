"""Dataset sources: these load a whole dataset into memory as tensors (``MapDataset`` reads examples on demand)."""

from abc import ABC, abstractmethod
from collections.abc import Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, cast

import numpy as np
import torch
import torchvision
from torch.utils.data import Dataset

from lightfed.data.client_groups import ClientGroups
from lightfed.errors import ConfigError, DatasetNotFoundError


@dataclass(frozen=True)
class TensorSplits:
    """A dataset held in memory: features float32, labels int64, and an optional natural client partition.

    `train_client_ids` gives each training example a natural client id (e.g. its writer), for `NaturalIdPartitioner`.

    A source's ``load`` returns it; the partitioners read ``train_labels``.

    Examples:
        >>> import torch
        >>> from lightfed.data import TensorSplits
        >>> splits = TensorSplits(
        ...     train_x=torch.zeros(6, 2), train_y=torch.tensor([0, 1, 0, 1, 2, 2]),
        ...     test_x=torch.zeros(2, 2), test_y=torch.tensor([0, 2]), num_classes=3,
        ... )
        >>> splits.num_train, splits.num_test, splits.train_labels
        (6, 2, array([0, 1, 0, 1, 2, 2]))
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    client_indices: Sequence[np.ndarray] | None = None
    train_client_ids: np.ndarray | None = None

    @property
    def train_labels(self) -> np.ndarray:
        return self.train_y.numpy()

    @property
    def num_train(self) -> int:
        return len(self.train_y)

    @property
    def num_test(self) -> int:
        return len(self.test_y)


@dataclass(frozen=True)
class DatasetSplits:
    """Map-style datasets read on demand; the training labels (for partitioners) and client ids when known.

    `val_indices`: the examples of `train` that are the dataset's own validation set (never given to a client).

    Examples:
        >>> import numpy as np
        >>> import torch
        >>> from torch.utils.data import TensorDataset
        >>> from lightfed.data import DatasetSplits
        >>> train = TensorDataset(torch.zeros(4, 2), torch.tensor([0, 1, 1, 0]))
        >>> test = TensorDataset(torch.zeros(2, 2), torch.tensor([0, 1]))
        >>> splits = DatasetSplits(train, test, num_classes=2, train_labels=np.array([0, 1, 1, 0]))
        >>> splits.num_train, splits.num_test
        (4, 2)
    """

    train: Dataset
    test: Dataset
    num_classes: int
    train_labels: np.ndarray | None = None
    train_client_ids: np.ndarray | None = None
    client_indices: Sequence[np.ndarray] | None = None
    val_indices: np.ndarray | None = None
    label_names: list[str] | None = None  # what each label code stands for, where the dataset coded its labels

    @property
    def num_train(self) -> int:
        return size(self.train)

    @property
    def num_test(self) -> int:
        return size(self.test)


def size(dataset: Dataset) -> int:
    """The number of examples of a map-style dataset (torch's ``Dataset`` type does not declare its ``__len__``)."""
    return len(cast(Sized, dataset))


class DatasetSource(ABC):
    """Where the examples come from; `load(seed)` returns them as tensors or as map-style datasets.

    A source of your own subclasses it, and a config names it under ``data.dataset``:

    ```yaml
    data:
      dataset: {class_path: my_project.data.Blobs}
      partitioner: {class_path: lightfed.data.IIDPartitioner, init_args: {num_clients: 2}}
    ```

    Examples:
        >>> import torch
        >>> from lightfed.data import DatasetSource, TensorSplits
        >>> class Blobs(DatasetSource):
        ...     def load(self, seed):
        ...         x = torch.randn(8, 2, generator=torch.Generator().manual_seed(seed))
        ...         y = (x[:, 0] > 0).long()
        ...         return TensorSplits(x[:6], y[:6], x[6:], y[6:], num_classes=2)
        >>> splits = Blobs().load(seed=0)
        >>> splits.num_train, splits.num_test
        (6, 2)
        >>> torch.equal(splits.train_x, Blobs().load(seed=0).train_x)  # the same seed, the same examples
        True
    """

    @abstractmethod
    def load(self, seed: int) -> TensorSplits | DatasetSplits:
        """Return the train and test examples; anything random depends only on `seed`."""


def _check_fraction(test_fraction: float) -> None:
    if not 0.0 < test_fraction < 1.0:
        raise ConfigError(f"test_fraction must be between 0 and 1 (exclusive), got {test_fraction}")


class Digits(DatasetSource):
    """scikit-learn's 8x8 handwritten digits (1797 images, 10 classes), no download needed.

    In a config:

    ```yaml
    data:
      dataset:
        class_path: lightfed.data.Digits
        init_args: {test_fraction: 0.2}
    ```

    Examples:
        >>> from lightfed.data import Digits
        >>> splits = Digits(test_fraction=0.2).load(seed=0)
        >>> splits.num_train, splits.num_test, tuple(splits.train_x.shape[1:])
        (1437, 360, (1, 8, 8))
        >>> Digits(test_fraction=1.0)
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: test_fraction must be between 0 and 1 (exclusive), got 1.0
    """

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

    With ``client_size`` every client holds that many examples, drawn in float32 (torch's generator) for blocks of
    clients at once: numbers of their own, not those of the FedProx-sized clients of the same seed.

    In a config (no partitioner: the clients are the generated ones):

    ```yaml
    data:
      dataset:
        class_path: lightfed.data.Synthetic
        init_args: {alpha: 1.0, beta: 1.0, num_clients: 30}
    ```

    Examples:
        >>> from lightfed.data import Synthetic
        >>> source = Synthetic(alpha=0.5, beta=0.5, num_clients=4, dim=5, num_classes=3, client_size=10)
        >>> splits = source.load(seed=0)
        >>> [len(client) for client in splits.client_indices], splits.num_test
        ([8, 8, 8, 8], 8)
        >>> tuple(splits.train_x.shape)
        (32, 5)
    """

    BLOCK = 1 << 22  # values (clients x client_size x dim) drawn at once with client_size

    def __init__(
        self,
        alpha: float = 1.0,
        beta: float = 1.0,
        num_clients: int = 30,
        dim: int = 60,
        num_classes: int = 10,
        test_fraction: float = 0.2,
        iid: bool = False,
        client_size: int | None = None,
        lognormal_sizes: tuple[float, float, int] = (4.0, 2.0, 50),
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
            client_size: Examples of every client (training and test share), drawn in float32 by blocks of clients;
                null: FedProx's sizes, int(lognormal(4, 2)) + 50, drawn client by client.
            lognormal_sizes: ``(mean, sigma, offset)`` of the client sizes without ``client_size``:
                int(lognormal(mean, sigma)) + offset; FedProx's (4, 2, 50) by default.
        """
        if alpha < 0 or beta < 0:
            raise ConfigError(f"alpha and beta must be >= 0, got alpha={alpha}, beta={beta}")
        if num_clients < 1:
            raise ConfigError(f"num_clients must be >= 1, got {num_clients}")
        if dim < 1:
            raise ConfigError(f"dim must be >= 1, got {dim}")
        if num_classes < 2:
            raise ConfigError(f"num_classes must be >= 2, got {num_classes}")
        if client_size is not None and client_size < 2:
            raise ConfigError(f"client_size must be >= 2 (a training and a test example) or null, got {client_size}")
        _check_fraction(test_fraction)
        if lognormal_sizes[1] < 0 or lognormal_sizes[2] < 2:
            raise ConfigError(f"lognormal_sizes needs sigma >= 0 and an offset >= 2, got {lognormal_sizes}")
        self.client_size = client_size
        self.lognormal_sizes = lognormal_sizes
        self.alpha = alpha
        self.beta = beta
        self.num_clients = num_clients
        self.dim = dim
        self.num_classes = num_classes
        self.test_fraction = test_fraction
        self.iid = iid

    def load(self, seed: int) -> TensorSplits:
        """Features (N, dim); `client_indices` holds each client's rows of `train_x`."""
        if self.client_size is not None:
            return self._load_blocks(seed, self.client_size)
        rng = np.random.default_rng(seed)
        mean, sigma, offset = self.lognormal_sizes
        sizes = rng.lognormal(mean, sigma, self.num_clients).astype(int) + offset
        std_x = np.arange(1, self.dim + 1) ** -0.6  # sqrt of Sigma_jj = j^-1.2
        shared = self._client_model(rng, 0.0, 0.0) if self.iid else None
        num_tests = [self._num_test(size) for size in sizes]
        splits = _EmptySplits(int(sizes.sum()) - sum(num_tests), sum(num_tests), self.dim, self.num_classes)
        for size, num_test in zip(sizes, num_tests, strict=True):  # float64 draws go straight into float32 storage
            w, b, v = shared if shared is not None else self._client_model(rng, self.alpha, self.beta)
            x = v + rng.standard_normal((size, self.dim)) * std_x
            splits.append(x[None], np.argmax(x @ w + b, axis=1)[None], size - num_test)  # argmax of softmax(logits)
        return splits.done()

    def _num_test(self, size: int) -> int:
        return min(size - 1, max(1, round(size * self.test_fraction)))

    def _load_blocks(self, seed: int, size: int) -> TensorSplits:
        """Every client ``size`` examples, drawn in float32 (torch's generator) for blocks of clients of about
        ``BLOCK`` values each."""
        generator = torch.Generator().manual_seed(seed)
        std_x = torch.arange(1, self.dim + 1, dtype=torch.float32) ** -0.6
        num_test = self._num_test(size)
        splits = _EmptySplits(
            self.num_clients * (size - num_test), self.num_clients * num_test, self.dim, self.num_classes
        )
        shared = self._client_models(generator, 1, 0.0, 0.0) if self.iid else None
        block = max(1, self.BLOCK // (size * self.dim))
        for start in range(0, self.num_clients, block):
            m = min(block, self.num_clients - start)
            w, b, v = shared if shared is not None else self._client_models(generator, m, self.alpha, self.beta)
            x = v[:, None, :] + torch.randn((m, size, self.dim), generator=generator) * std_x
            y = torch.argmax(torch.matmul(x, w) + b[:, None, :], dim=2)  # argmax of softmax(logits) is of logits
            splits.append(x.numpy(), y.numpy(), size - num_test)
        return splits.done()

    def _client_model(
        self, rng: np.random.Generator, alpha: float, beta: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw one client's W (dim, classes), b (classes) and input mean v (dim)."""
        u = rng.normal(0, alpha)
        w = rng.normal(u, 1, (self.dim, self.num_classes))
        b = rng.normal(u, 1, self.num_classes)
        v = rng.normal(rng.normal(0, beta), 1, self.dim)
        return w, b, v

    def _client_models(
        self, generator: torch.Generator, m: int, alpha: float, beta: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draw ``m`` clients' W (m, dim, classes), b (m, classes) and input means v (m, dim) in float32."""
        u = torch.randn((m, 1), generator=generator) * alpha
        w = u[:, :, None] + torch.randn((m, self.dim, self.num_classes), generator=generator)
        b = u + torch.randn((m, self.num_classes), generator=generator)
        v = torch.randn((m, 1), generator=generator) * beta + torch.randn((m, self.dim), generator=generator)
        return w, b, v


class _EmptySplits:
    """The float32 and int64 storage of a generated dataset, filled client by client: each client's first
    ``num_train`` examples train, the rest join the central test set."""

    def __init__(self, num_train: int, num_test: int, dim: int, num_classes: int) -> None:
        self.train_x, self.train_y = np.empty((num_train, dim), np.float32), np.empty(num_train, np.int64)
        self.test_x, self.test_y = np.empty((num_test, dim), np.float32), np.empty(num_test, np.int64)
        self.num_classes, self.train_at, self.test_at = num_classes, 0, 0
        self.client_starts: list[int] = []

    def append(self, x: np.ndarray, y: np.ndarray, num_train: int) -> None:
        """Clients of as many examples each: ``x`` (clients, examples, dim), ``y`` (clients, examples)."""
        m, size = y.shape
        train = slice(self.train_at, self.train_at + m * num_train)
        test = slice(self.test_at, self.test_at + m * (size - num_train))
        shares = (
            (self.train_x, self.train_y, train, slice(None, num_train)),
            (self.test_x, self.test_y, test, slice(num_train, None)),
        )
        for features, labels, rows, examples in shares:  # one copy each, straight into the storage
            np.copyto(features[rows].reshape(m, -1, x.shape[2]), x[:, examples])
            np.copyto(labels[rows].reshape(m, -1), y[:, examples])
        self.client_starts.extend(range(self.train_at, train.stop, num_train))
        self.train_at, self.test_at = train.stop, test.stop

    def done(self) -> TensorSplits:
        rows = np.arange(self.train_at, dtype=np.int64)
        return TensorSplits(
            train_x=torch.from_numpy(self.train_x),
            train_y=torch.from_numpy(self.train_y),
            test_x=torch.from_numpy(self.test_x),
            test_y=torch.from_numpy(self.test_y),
            num_classes=self.num_classes,
            client_indices=ClientGroups(rows, np.append(self.client_starts, self.train_at)),  # views of one array
        )


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
    """CIFAR-10: 32x32 colour images, 10 classes, 50000 train and 10000 test.

    In a config (the python files under ``data/``):

    ```yaml
    data:
      dataset:
        class_path: lightfed.data.CIFAR10
        init_args: {root: data, download: false}
    ```

    Examples:
        >>> import tempfile
        >>> from lightfed.data import CIFAR10
        >>> CIFAR10.num_classes, CIFAR10.mean
        (10, (0.4914, 0.4822, 0.4465))
        >>> with tempfile.TemporaryDirectory() as root:
        ...     CIFAR10(root=root).load(seed=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.DatasetNotFoundError: CIFAR10 files missing or corrupted in .../cifar-10-batches-py (expected
        data_batch_1..5, test_batch, batches.meta); pass download=True or copy them there
    """

    dataset_class = torchvision.datasets.CIFAR10
    folder = "cifar-10-batches-py"
    files = "data_batch_1..5, test_batch, batches.meta"
    mean = (0.4914, 0.4822, 0.4465)
    std = (0.2470, 0.2435, 0.2616)
    num_classes = 10


class CIFAR100(_TorchvisionSource):
    """CIFAR-100: 32x32 colour images, 100 fine classes, 50000 train and 10000 test.

    In a config:

    ```yaml
    data:
      dataset:
        class_path: lightfed.data.CIFAR100
        init_args: {root: data, download: false}
    ```

    Examples:
        >>> import tempfile
        >>> from lightfed.data import CIFAR100
        >>> CIFAR100.num_classes, CIFAR100.folder
        (100, 'cifar-100-python')
        >>> with tempfile.TemporaryDirectory() as root:
        ...     CIFAR100(root=root).load(seed=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.DatasetNotFoundError: CIFAR100 files missing or corrupted in .../cifar-100-python (expected
        train, test, meta); pass download=True or copy them there
    """

    dataset_class = torchvision.datasets.CIFAR100
    folder = "cifar-100-python"
    files = "train, test, meta"
    mean = (0.5071, 0.4865, 0.4409)
    std = (0.2673, 0.2564, 0.2762)
    num_classes = 100


class MNIST(_TorchvisionSource):
    """MNIST: 28x28 grey handwritten digits, 10 classes, 60000 train and 10000 test.

    In a config:

    ```yaml
    data:
      dataset:
        class_path: lightfed.data.MNIST
        init_args: {root: data, download: false}
    ```

    Examples:
        >>> import tempfile
        >>> from lightfed.data import MNIST
        >>> MNIST.num_classes, MNIST.mean, MNIST.std
        (10, (0.1307,), (0.3081,))
        >>> with tempfile.TemporaryDirectory() as root:
        ...     MNIST(root=root).load(seed=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.DatasetNotFoundError: MNIST files missing or corrupted in .../MNIST/raw (expected ...);
        pass download=True or copy them there
    """

    dataset_class = torchvision.datasets.MNIST
    folder = "MNIST/raw"
    files = "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte"
    mean = (0.1307,)
    std = (0.3081,)
    num_classes = 10


class FashionMNIST(_TorchvisionSource):
    """Fashion-MNIST: 28x28 grey clothing images, 10 classes, 60000 train and 10000 test.

    In a config:

    ```yaml
    data:
      dataset:
        class_path: lightfed.data.FashionMNIST
        init_args: {root: data, download: false}
    ```

    Examples:
        >>> import tempfile
        >>> from lightfed.data import FashionMNIST
        >>> FashionMNIST.num_classes, FashionMNIST.folder
        (10, 'FashionMNIST/raw')
        >>> with tempfile.TemporaryDirectory() as root:
        ...     FashionMNIST(root=root).load(seed=0)
        Traceback (most recent call last):
        ...
        lightfed.errors.DatasetNotFoundError: FashionMNIST files missing or corrupted in .../FashionMNIST/raw
        (expected ...); pass download=True or copy them there
    """

    dataset_class = torchvision.datasets.FashionMNIST
    folder = "FashionMNIST/raw"
    files = MNIST.files
    mean = (0.2860,)
    std = (0.3530,)
    num_classes = 10
