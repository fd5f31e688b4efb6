"""Data at the scale of a large population: Synthetic without a float64 copy of the whole set, small clients drawn
by blocks, and central evaluation bounded by a fixed sample (``data.eval_examples``)."""

import hashlib
import tracemalloc

import numpy as np
import pytest
import torch

from lightfed.data import Synthetic
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError


def _digest(splits) -> str:
    digest = hashlib.sha256()
    for tensor in (splits.train_x, splits.train_y, splits.test_x, splits.test_y):
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def test_the_fedprox_sized_clients_keep_their_numbers():
    """The digest of what the implementation with float64 copies of the whole set drew for this seed."""
    assert _digest(Synthetic(num_clients=5, dim=4).load(0)) == (
        "cf9f2a64f1d792f48f6ec714c7c6167854d864aca8c17f808cb4f767d5a5d96f"
    )


@pytest.mark.parametrize("client_size", [None, 12])
def test_loading_peaks_below_twice_the_size_of_the_data(client_size):
    """Drawing float64 and concatenating before the cast to float32 peaked at 4.3 times the data."""
    tracemalloc.start()
    splits = Synthetic(num_clients=100, dim=60, client_size=client_size).load(0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    size = sum(t.numel() * t.element_size() for t in (splits.train_x, splits.train_y, splits.test_x, splits.test_y))
    assert peak < 2 * size


def test_clients_of_one_size_are_drawn_in_float32_by_blocks(monkeypatch):
    splits = Synthetic(num_clients=7, client_size=10, dim=3, test_fraction=0.2).load(0)
    assert splits.train_x.dtype == torch.float32 and splits.train_x.shape == (7 * 8, 3) and len(splits.test_y) == 14
    assert [list(rows) for rows in splits.client_indices] == [list(range(8 * k, 8 * k + 8)) for k in range(7)]
    assert _digest(Synthetic(num_clients=7, client_size=10, dim=3).load(0)) == _digest(splits)
    assert _digest(Synthetic(num_clients=7, client_size=10, dim=3).load(1)) != _digest(splits)
    monkeypatch.setattr(Synthetic, "BLOCK", 60)  # blocks of 2 clients: other draws, the same shapes
    assert Synthetic(num_clients=7, client_size=10, dim=3).load(0).train_x.shape == (56, 3)


def test_clients_of_one_size_differ_as_beta_says_and_share_everything_when_iid():
    def spread_of_client_means(**options) -> float:
        splits = Synthetic(num_clients=200, client_size=40, dim=5, **options).load(0)
        return splits.train_x.reshape(200, 32, 5).mean(dim=1).std(dim=0).mean().item()

    assert spread_of_client_means(iid=True) < 0.3 < 1.0 < spread_of_client_means(beta=5.0)  # v_k ~ N(B_k, 1)


def test_a_client_size_below_two_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="client_size must be >= 2"):
        Synthetic(client_size=1)


def _data(eval_examples, seed: int = 0) -> FederatedDataModule:
    data = FederatedDataModule(Synthetic(num_clients=40, client_size=20, dim=3), eval_examples=eval_examples)
    data.setup(seed, torch.device("cpu"))
    return data


def test_central_evaluation_reads_a_fixed_sample_of_the_validation_and_test_splits(capsys):
    whole = _data(None)
    assert len(whole.val_indices) == 80 and len(whole.test_y) == 160  # 2 of each client's 16 training, 4 test
    capsys.readouterr()
    sampled = _data(50)
    assert "validation 50 of its 80 examples, test 50 of its 160 examples" in capsys.readouterr().out
    assert len(sampled.val_indices) == 50 and set(sampled.val_indices.tolist()) <= set(whole.val_indices.tolist())
    rows = [int(np.flatnonzero((whole.test_x == row).all(dim=1))[0]) for row in sampled.test_x]
    assert len(set(rows)) == 50 and rows == sorted(rows)  # 50 of the test examples, in their order
    assert torch.equal(_data(50).val_indices, sampled.val_indices)  # fixed by the seed
    assert not torch.equal(_data(50, seed=1).test_x, _data(50).test_x)
    trained = {int(i) for client in range(40) for i in sampled._source.client_indices[client]}
    assert trained.isdisjoint(whole.val_indices.tolist())  # examples left out of the sample are not trained on


def test_the_default_bound_leaves_small_runs_as_they_were(capsys):
    default, whole = FederatedDataModule(Synthetic(num_clients=40, client_size=20, dim=3)), _data(None)
    default.setup(0, torch.device("cpu"))
    assert torch.equal(default.val_indices, whole.val_indices) and torch.equal(default.test_x, whole.test_x)
    assert "fixed sample" not in capsys.readouterr().out


def test_an_evaluation_bound_below_one_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="data.eval_examples must be >= 1"):
        FederatedDataModule(eval_examples=0)
