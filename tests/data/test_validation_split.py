"""The validation split: training examples held out before the clients get theirs, stratified and seeded; never the
test set. And the per-client held-out share that per-client evaluation reads."""

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from lightfed.data import (
    Digits,
    DirichletPartitioner,
    IIDPartitioner,
    MapDataset,
    MarkovText,
    NaturalIdPartitioner,
    Synthetic,
)
from lightfed.data.module import FederatedDataModule
from lightfed.data.validation import held_out
from lightfed.errors import ConfigError

CPU = torch.device("cpu")
DIGITS_TRAIN = 1437  # Digits' 1797 examples less its 20 % test set


def _digits(seed: int = 0, **settings) -> FederatedDataModule:
    data = FederatedDataModule(
        Digits(), DirichletPartitioner(8, alpha=0.5), batch_size=16, eval_batch_size=50, **settings
    )
    data.setup(seed=seed, device=CPU)
    return data


def _clients(data: FederatedDataModule) -> np.ndarray:
    return np.concatenate([indices.numpy() for indices in data._client_indices])


def test_the_validation_split_is_a_stratified_tenth_of_the_training_examples_that_no_client_holds():
    data = _digits()
    val, clients = data.val_indices.numpy(), _clients(data)
    assert len(val) == round(0.1 * DIGITS_TRAIN) == 144
    assert len(np.intersect1d(val, clients)) == 0 and len(clients) == len(np.unique(clients))
    assert np.array_equal(np.union1d(val, clients), np.arange(DIGITS_TRAIN))  # every training example used once
    assert data.num_train_examples == len(clients) == DIGITS_TRAIN - 144
    labels = data.train_y.numpy()
    per_class, in_val = np.bincount(labels, minlength=10), np.bincount(labels[val], minlength=10)
    assert np.all(np.abs(in_val - per_class * 144 / DIGITS_TRAIN) < 1)  # each class within one of its share
    assert torch.equal(data.val_y, data.train_y[data.val_indices]) and torch.equal(
        data.val_x, data.train_x[data.val_indices]
    )
    assert np.array_equal(_digits().val_indices.numpy(), val)  # the same seed, the same split
    assert not np.array_equal(_digits(seed=1).val_indices.numpy(), val)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_validation_shards_cover_the_split_exactly_once_in_order(world_size):
    data = _digits()
    batches = [batch for rank in range(world_size) for batch in data.val_batches(rank, world_size)]
    assert torch.equal(torch.cat([x for x, _ in batches]), data.val_x)
    assert torch.equal(torch.cat([y for _, y in batches]), data.val_y)
    assert max(len(y) for _, y in batches) <= 50


def test_held_out_by_hand():
    """Evenly spaced picks over the examples shuffled and grouped by stratum: 2 of 4 'a' and 1 of 2 'b'."""
    rng = np.random.default_rng(0)
    strata = np.array(["a", "b", "a", "a", "b", "a"])
    picks = held_out(6, 3, np.random.default_rng(0), strata)
    order = rng.permutation(6)
    order = order[np.argsort(strata[order], kind="stable")]
    assert np.array_equal(picks, np.sort(order[[1, 3, 5]]))  # positions (j + 1/2) * 6 / 3 for j = 0, 1, 2
    assert sorted(strata[picks]) == ["a", "a", "b"]
    assert len(held_out(6, 0, np.random.default_rng(0))) == 0


def test_a_map_style_dataset_holds_out_the_same_examples_as_the_same_tensors():
    tensors = Digits().load(seed=0)
    dataset = MapDataset(
        TensorDataset(tensors.train_x, tensors.train_y),
        TensorDataset(tensors.test_x, tensors.test_y),
        targets=tensors.train_y.tolist(),
    )
    mapped = FederatedDataModule(dataset, DirichletPartitioner(8, alpha=0.5), batch_size=16, eval_batch_size=50)
    mapped.setup(seed=0, device=CPU)
    in_memory = _digits()
    assert torch.equal(mapped.val_indices, in_memory.val_indices)
    assert all(torch.equal(a, b) for a, b in zip(mapped._client_indices, in_memory._client_indices, strict=False))
    for world_size in (1, 2):
        batches = [batch for rank in range(world_size) for batch in mapped.val_batches(rank, world_size)]
        assert torch.equal(torch.cat([x for x, _ in batches]), in_memory.val_x)


def test_a_naturally_federated_dataset_gives_a_share_of_each_clients_examples():
    """Synthetic: the validation split takes round(n_k / 10) (at least one, never all) of each client's examples,
    so it holds the clients in the proportions the federation does."""
    source = Synthetic(num_clients=6, dim=10)
    own = source.load(seed=3).client_indices
    data = FederatedDataModule(source, batch_size=16)
    data.setup(seed=3, device=CPU)
    val = data.val_indices.numpy()
    for k, indices in enumerate(own):
        held = np.intersect1d(indices, val)
        assert len(held) == min(len(indices) - 1, max(1, round(0.1 * len(indices))))
        assert np.array_equal(np.union1d(held, data._client_indices[k].numpy()), indices)
        assert len(np.intersect1d(held, data._client_indices[k].numpy())) == 0
    assert len(val) == sum(min(len(i) - 1, max(1, round(0.1 * len(i)))) for i in own)


def test_a_natural_id_dataset_gives_each_writer_its_share_and_validates_on_dict_batches():
    corpus = MarkovText(num_writers=6, vocab_size=8, seq_len=10, windows_per_writer=20)
    windows, writers = corpus.load(0).train.windows, corpus.load(0).train.client_ids
    data = FederatedDataModule(corpus, NaturalIdPartitioner(), batch_size=4, eval_batch_size=7)
    data.setup(seed=0, device=CPU)
    val = data.val_indices.numpy()
    assert len(val) == round(0.1 * len(writers))
    share = len(val) / len(writers)
    for writer in range(6):
        assert abs(np.sum(writers[val] == writer) - share * np.sum(writers == writer)) < 1
        assert data.client_size(writer) == np.sum(writers == writer) - np.sum(writers[val] == writer)
    batches = list(data.val_batches())
    assert all(set(batch) == {"tokens", "targets"} and len(batch["tokens"]) <= 7 for batch in batches)
    assert torch.equal(torch.cat([batch["tokens"] for batch in batches]), windows[val][:, :-1])


def test_no_validation_split_only_when_asked_and_then_no_validation_batches():
    data = _digits(val_fraction=0.0)
    assert not data.has_validation and len(_clients(data)) == DIGITS_TRAIN
    with pytest.raises(ConfigError, match=r"data.val_fraction is 0: there is no validation split"):
        list(data.val_batches())


@pytest.mark.parametrize("key, value", [("val_fraction", -0.1), ("val_fraction", 1.0), ("client_val_fraction", 1.0)])
def test_fractions_outside_zero_to_one_are_refused(key, value):
    with pytest.raises(ConfigError, match=rf"data.{key} must be >= 0 and < 1, got {value}"):
        FederatedDataModule(Digits(), IIDPartitioner(4), **{key: value})


def test_a_client_held_out_share_is_evaluated_and_never_trained_on():
    whole = _digits()
    data = _digits(client_val_fraction=0.2)
    assert torch.equal(data.val_indices, whole.val_indices)  # the server's split is taken first, unchanged
    for k in range(data.num_clients):
        given = whole._client_indices[k].numpy()
        trained, evaluated = data._client_indices[k].numpy(), data.client_val_indices(k).numpy()
        assert len(evaluated) == min(len(given) - 1, max(1, round(0.2 * len(given))))
        assert np.array_equal(np.union1d(trained, evaluated), given) and len(np.intersect1d(trained, evaluated)) == 0
        assert data.client_size(k) == len(trained)
        labels = torch.cat([y for _, y in data.client_eval_batches(k)])
        assert torch.equal(labels, data.train_y[evaluated])
        seen = torch.cat([y for _, y in data.client_batches(k, torch.Generator().manual_seed(0), epochs=1)])
        assert len(seen) == len(trained)
    assert data.num_train_examples == sum(map(data.client_size, range(data.num_clients))) < whole.num_train_examples
    # without a held-out share, per-client evaluation reads the client's own training examples
    assert torch.equal(torch.cat([y for _, y in whole.client_eval_batches(2)]), whole.train_y[whole._client_indices[2]])


def test_per_client_evaluation_reads_each_clients_held_out_share(tmp_path):
    from lightfed.strategies import FedAvg
    from tests.conftest import small_model, small_trainer

    model, data = small_model(), _digits(client_val_fraction=0.25)
    metrics = small_trainer(tmp_path, client_eval_interval=3).fit(model, data, FedAvg())
    model.eval()
    with torch.no_grad():
        accuracies = [
            (model(data.train_x[i]).argmax(1) == data.train_y[i]).double().mean().item()
            for i in map(data.client_val_indices, range(data.num_clients))
        ]
    assert metrics["clients/val_acc_mean"] == pytest.approx(np.mean(accuracies), abs=1e-6)
    assert metrics["clients/val_acc_min"] == pytest.approx(min(accuracies), abs=1e-6)


def test_the_digits_and_cifar_configs_state_their_split():
    """Each base states the split (0.1 held out; digits keeps 0.2 for its test set) and no overlay changes it."""
    from pathlib import Path

    import yaml

    configs = Path(__file__).resolve().parents[2] / "configs"
    folders = ["digits", "cifar10", "cifar100", "adaptfed/cifar10", "adaptfed/cifar100"]
    for folder in folders:
        data = yaml.safe_load((configs / folder / "base.yaml").read_text())["data"]
        assert data["val_fraction"] == 0.1, folder
        if data["dataset"]["class_path"] == "lightfed.data.Digits":
            assert data["dataset"]["init_args"]["test_fraction"] == 0.2, folder
        overlays = [path for path in (configs / folder).glob("*.yaml") if path.name != "base.yaml"]
        assert overlays, folder
        for path in overlays:
            data = yaml.safe_load(path.read_text()).get("data") or {}
            dataset = (data.get("dataset") or {}).get("init_args") or {}
            assert "val_fraction" not in data and "test_fraction" not in dataset, path
