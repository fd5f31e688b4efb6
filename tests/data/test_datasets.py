import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from lightfed.data import CIFAR10, CIFAR100, MNIST, Digits, FashionMNIST, Synthetic, TensorSplits
from lightfed.errors import ConfigError, DatasetNotFoundError


def mean_label_entropy(splits: TensorSplits) -> float:
    entropies = []
    for indices in splits.client_indices:
        p = np.bincount(splits.train_y[indices].numpy(), minlength=splits.num_classes) / len(indices)
        p = p[p > 0]
        entropies.append(-(p * np.log(p)).sum())
    return float(np.mean(entropies))


def mean_distance_to_global_labels(splits: TensorSplits) -> float:
    """Mean total-variation distance between each client's label distribution and the pooled one."""
    pooled = np.bincount(splits.train_y.numpy(), minlength=splits.num_classes) / len(splits.train_y)
    distances = []
    for indices in splits.client_indices:
        own = np.bincount(splits.train_y[indices].numpy(), minlength=splits.num_classes) / len(indices)
        distances.append(0.5 * np.abs(own - pooled).sum())
    return float(np.mean(distances))


def assert_same(a: TensorSplits, b: TensorSplits) -> None:
    for name in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(a, name), getattr(b, name))


# --- Digits ---------------------------------------------------------------------------------------


def test_digits_shapes_dtypes_and_range() -> None:
    splits = Digits().load(seed=0)
    # 1797 images; sklearn rounds the test share up: ceil(0.2 * 1797) = 360
    assert splits.train_x.shape == (1437, 1, 8, 8) and splits.test_x.shape == (360, 1, 8, 8)
    assert splits.train_x.dtype == torch.float32 and splits.train_y.dtype == torch.int64
    assert splits.train_x.min() == 0.0 and splits.train_x.max() == 1.0
    assert splits.num_classes == 10 and splits.client_indices is None
    assert set(splits.train_y.tolist()) == set(range(10))


def test_digits_split_is_deterministic_from_seed() -> None:
    assert_same(Digits().load(seed=1), Digits().load(seed=1))
    assert not torch.equal(Digits().load(seed=1).test_y, Digits().load(seed=2).test_y)


def test_digits_split_is_stratified() -> None:
    splits = Digits(test_fraction=0.25).load(seed=0)
    train_counts = np.bincount(splits.train_y.numpy(), minlength=10)
    test_counts = np.bincount(splits.test_y.numpy(), minlength=10)
    assert np.all(np.abs(test_counts - 0.25 * (train_counts + test_counts)) <= 1)


@pytest.mark.parametrize("test_fraction", [0.0, 1.0, -0.1])
def test_digits_rejects_bad_test_fraction(test_fraction: float) -> None:
    with pytest.raises(ConfigError, match="test_fraction"):
        Digits(test_fraction=test_fraction)


# --- Synthetic ------------------------------------------------------------------------------------


def test_synthetic_shapes_and_client_indices_cover_train_set() -> None:
    splits = Synthetic(num_clients=12, dim=20, num_classes=5).load(seed=0)
    assert splits.train_x.dtype == torch.float32 and splits.train_x.shape[1] == 20
    assert splits.test_x.shape[1] == 20 and splits.train_y.dtype == torch.int64
    assert len(splits.client_indices) == 12
    np.testing.assert_array_equal(np.concatenate(splits.client_indices), np.arange(len(splits.train_y)))
    labels = torch.cat([splits.train_y, splits.test_y])
    assert splits.num_classes == 5 and labels.min() >= 0 and labels.max() < 5


def test_synthetic_client_sizes_and_test_share() -> None:
    splits = Synthetic(num_clients=40, test_fraction=0.2).load(seed=0)
    # every client has >= 50 examples, of which round(0.2 * n) are held out: >= 40 remain for training
    assert min(len(indices) for indices in splits.client_indices) >= 40
    total = len(splits.train_y) + len(splits.test_y)
    assert abs(len(splits.test_y) - 0.2 * total) <= 40 * 0.5  # rounding, at most half an example per client


def test_synthetic_client_sizes_follow_the_lognormal_given() -> None:
    data = Synthetic(num_clients=20, lognormal_sizes=(3.0, 0.5, 5))
    sizes = np.random.default_rng(7).lognormal(3.0, 0.5, 20).astype(int) + 5  # the first numbers its seed draws
    splits = data.load(seed=7)
    assert [len(i) + data._num_test(int(n)) for i, n in zip(splits.client_indices, sizes, strict=True)] == list(sizes)
    with pytest.raises(ConfigError, match="lognormal_sizes needs sigma >= 0 and an offset >= 2"):
        Synthetic(lognormal_sizes=(3.0, 0.5, 1))


def test_synthetic_is_deterministic_from_seed() -> None:
    assert_same(Synthetic().load(seed=5), Synthetic().load(seed=5))
    assert not torch.equal(Synthetic().load(seed=5).train_x[:50], Synthetic().load(seed=6).train_x[:50])


def test_synthetic_feature_covariance_is_power_law() -> None:
    splits = Synthetic(num_clients=30).load(seed=0)
    centred = torch.cat([splits.train_x[i] - splits.train_x[i].mean(0) for i in splits.client_indices])
    expected = np.arange(1, 61) ** -1.2
    np.testing.assert_allclose(centred.var(0).numpy(), expected, rtol=0.15)


def test_synthetic_larger_beta_skews_client_labels_more() -> None:
    homogeneous = Synthetic(alpha=0.0, beta=0.0, num_clients=50).load(seed=0)
    heterogeneous = Synthetic(alpha=5.0, beta=5.0, num_clients=50).load(seed=0)
    assert mean_label_entropy(heterogeneous) < 0.8 * mean_label_entropy(homogeneous)


def test_synthetic_iid_clients_share_one_label_distribution() -> None:
    iid = Synthetic(num_clients=30, iid=True).load(seed=0)
    non_iid = Synthetic(num_clients=30).load(seed=0)
    assert mean_distance_to_global_labels(iid) < 0.15 < 0.5 < mean_distance_to_global_labels(non_iid)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"alpha": -1.0}, "alpha"),
        ({"beta": -0.5}, "beta"),
        ({"num_clients": 0}, "num_clients"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"num_classes": 1}, "num_classes"),
        ({"dim": 0}, "dim"),
    ],
)
def test_synthetic_rejects_bad_settings(kwargs: dict, word: str) -> None:
    with pytest.raises(ConfigError, match=word):
        Synthetic(**kwargs)


# --- torchvision sources, read from tiny fake folders in the real on-disk format ----------------


def write_fake_cifar(folder: Path, n: int, cifar100: bool, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Pickled dicts as in the CIFAR python archives; returns the raw train and test arrays."""
    folder.mkdir(parents=True)
    label_key = "fine_labels" if cifar100 else "labels"
    num_classes = 100 if cifar100 else 10
    batches = ["train", "test"] if cifar100 else [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    raw = {}
    for name in batches:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)  # rows: 1024 red, 1024 green, 1024 blue
        labels = rng.integers(0, num_classes, n).tolist()
        raw[name] = (data, labels)
        with open(folder / name, "wb") as f:
            pickle.dump({"data": data, label_key: labels}, f)
    meta_name, meta_key = ("meta", "fine_label_names") if cifar100 else ("batches.meta", "label_names")
    with open(folder / meta_name, "wb") as f:
        pickle.dump({meta_key: [str(c) for c in range(num_classes)]}, f)
    train = [raw[name] for name in batches[:-1]]
    return {
        "train_x": np.concatenate([d for d, _ in train]).reshape(-1, 3, 32, 32),
        "train_y": np.concatenate([y for _, y in train]),
        "test_x": raw[batches[-1]][0].reshape(-1, 3, 32, 32),
        "test_y": np.array(raw[batches[-1]][1]),
    }


def write_idx(path: Path, array: np.ndarray) -> None:
    """IDX file as in the MNIST archives: magic 0x0000 08 <ndim> (unsigned bytes), big-endian sizes."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_fake_mnist(folder: Path, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    folder.mkdir(parents=True)
    raw = {}
    for prefix, split in (("train", "train"), ("t10k", "test")):
        raw[f"{split}_x"] = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        raw[f"{split}_y"] = rng.integers(0, 10, n).astype(np.uint8)
        write_idx(folder / f"{prefix}-images-idx3-ubyte", raw[f"{split}_x"])
        write_idx(folder / f"{prefix}-labels-idx1-ubyte", raw[f"{split}_y"])
    raw["train_x"], raw["test_x"] = raw["train_x"][:, None], raw["test_x"][:, None]
    return raw


def check_against_raw(splits: TensorSplits, raw: dict[str, np.ndarray], mean: tuple, std: tuple) -> None:
    mean_, std_ = np.array(mean).reshape(1, -1, 1, 1), np.array(std).reshape(1, -1, 1, 1)
    for split in ("train", "test"):
        x = getattr(splits, f"{split}_x")
        assert x.dtype == torch.float32 and x.shape == raw[f"{split}_x"].shape
        np.testing.assert_allclose(x.numpy(), (raw[f"{split}_x"] / 255 - mean_) / std_, rtol=1e-5, atol=1e-5)
        y = getattr(splits, f"{split}_y")
        assert y.dtype == torch.int64
        np.testing.assert_array_equal(y.numpy(), raw[f"{split}_y"])


@pytest.fixture
def skip_cifar_checksums(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchvision checks the CIFAR files' MD5 sums; fake files can only pass an existence check."""
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda path, md5=None: Path(path).is_file())


@pytest.mark.parametrize(
    "source_class, folder, cifar100, mean, std",
    [
        (CIFAR10, "cifar-10-batches-py", False, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
        (CIFAR100, "cifar-100-python", True, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    ],
)
def test_cifar_reads_fake_folder(
    tmp_path: Path,
    skip_cifar_checksums: None,
    source_class: type,
    folder: str,
    cifar100: bool,
    mean: tuple,
    std: tuple,
) -> None:
    raw = write_fake_cifar(tmp_path / folder, n=4, cifar100=cifar100, rng=np.random.default_rng(0))
    splits = source_class(root=str(tmp_path)).load(seed=0)
    assert splits.train_x.shape == (20 if not cifar100 else 4, 3, 32, 32)
    assert splits.num_classes == (100 if cifar100 else 10)
    check_against_raw(splits, raw, mean, std)


@pytest.mark.parametrize(
    "source_class, mean, std", [(MNIST, (0.1307,), (0.3081,)), (FashionMNIST, (0.2860,), (0.3530,))]
)
def test_mnist_reads_fake_idx_files(tmp_path: Path, source_class: type, mean: tuple, std: tuple) -> None:
    raw = write_fake_mnist(tmp_path / source_class.__name__ / "raw", n=5, rng=np.random.default_rng(0))
    splits = source_class(root=str(tmp_path)).load(seed=0)
    assert splits.train_x.shape == (5, 1, 28, 28) and splits.num_classes == 10
    check_against_raw(splits, raw, mean, std)


@pytest.mark.parametrize(
    "source_class, folder, files",
    [
        (CIFAR10, "cifar-10-batches-py", "data_batch_1..5, test_batch"),
        (CIFAR100, "cifar-100-python", "train, test, meta"),
        (MNIST, "MNIST/raw", "train-images-idx3-ubyte"),
        (FashionMNIST, "FashionMNIST/raw", "t10k-labels-idx1-ubyte"),
    ],
)
def test_missing_files_raise_dataset_not_found(tmp_path: Path, source_class: type, folder: str, files: str) -> None:
    with pytest.raises(DatasetNotFoundError) as caught:
        source_class(root=str(tmp_path / "nowhere")).load(seed=0)
    message = str(caught.value)
    assert "\n" not in message
    assert str(tmp_path / "nowhere" / folder) in message
    assert files in message and "download=True" in message


def test_relative_root_is_reported_as_absolute_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path.resolve() / "data" / "cifar-10-batches-py"
    with pytest.raises(DatasetNotFoundError, match=re.escape(str(folder))):
        CIFAR10().load(seed=0)


def test_cifar_files_with_wrong_checksums_raise_dataset_not_found(tmp_path: Path) -> None:
    write_fake_cifar(tmp_path / "cifar-10-batches-py", n=2, cifar100=False, rng=np.random.default_rng(0))
    with pytest.raises(DatasetNotFoundError, match="corrupted"):
        CIFAR10(root=str(tmp_path)).load(seed=0)
