"""MarkovText: a seeded synthetic corpus of next-token windows, one natural client per writer, read as dict batches."""

import numpy as np
import pytest
import torch

from lightfed.data import MarkovText, NaturalIdPartitioner, NextTokenDataset
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError

CPU = torch.device("cpu")


def small_corpus(**settings) -> MarkovText:
    return MarkovText(**{**dict(num_writers=6, vocab_size=8, seq_len=10, windows_per_writer=20), **settings})


def writer_windows(dataset: NextTokenDataset, writer: int) -> torch.Tensor:
    return dataset.windows[torch.from_numpy(dataset.client_ids == writer)]


def test_the_corpus_is_a_function_of_the_seed() -> None:
    first, again, other = small_corpus().load(3), small_corpus().load(3), small_corpus().load(4)
    for split in ("train", "test"):
        assert torch.equal(getattr(first, split).windows, getattr(again, split).windows)
        assert np.array_equal(getattr(first, split).client_ids, getattr(again, split).client_ids)
    assert not torch.equal(first.train.windows[:20], other.train.windows[:20])


def test_items_are_dicts_of_tokens_and_the_tokens_that_follow_them() -> None:
    splits = small_corpus().load(0)
    assert splits.num_classes == 8 and splits.train_labels is None
    assert np.array_equal(splits.train_client_ids, splits.train.client_ids)
    item = splits.train[5]
    assert set(item) == {"tokens", "targets"}
    assert item["tokens"].shape == item["targets"].shape == (10,) and item["tokens"].dtype == torch.int64
    assert torch.equal(item["tokens"][1:], item["targets"][:-1])
    assert int(splits.train.windows.min()) >= 0 and int(splits.train.windows.max()) < 8


def test_each_writer_writes_one_running_text_whose_last_windows_are_held_out() -> None:
    splits = small_corpus().load(0)
    for writer in range(6):
        train, test = writer_windows(splits.train, writer), writer_windows(splits.test, writer)
        count = len(train) + len(test)
        assert 10 <= count <= 30 and len(test) == round(0.2 * count)
        text = torch.cat([train, test])
        assert torch.equal(text[1:, 0], text[:-1, -1])  # neighbouring windows share their boundary token


def test_the_text_follows_the_chains_it_is_drawn_from() -> None:
    """Empirical next-token frequencies of each context match the transition rows (total variation below 0.1)."""
    source = MarkovText(num_writers=2, vocab_size=4, seq_len=50, windows_per_writer=300, order=2)
    splits = source.load(7)
    chains = source.transitions(np.random.default_rng(7))  # the first draws of load(7)
    for writer in range(2):
        windows = writer_windows(splits.train, writer).numpy()
        context = windows[:, :-2] * 4 + windows[:, 1:-1]
        counts = np.zeros((16, 4))
        np.add.at(counts, (context.ravel(), windows[:, 2:].ravel()), 1)
        seen = counts.sum(1) >= 200
        assert seen.sum() >= 8
        frequencies = counts[seen] / counts[seen].sum(1, keepdims=True)
        assert 0.5 * np.abs(frequencies - chains[writer][seen]).sum(1).max() < 0.1


def test_heterogeneity_sets_how_far_the_writers_chains_are_apart() -> None:
    def spread(heterogeneity: float) -> float:
        chains = small_corpus(heterogeneity=heterogeneity).transitions(np.random.default_rng(0))
        assert np.allclose(chains.sum(-1), 1.0)
        return float(np.abs(chains - chains.mean(0)).max())

    assert spread(0.0) < 1e-12
    assert 0.1 < spread(0.3) < spread(1.0)


def test_the_data_module_gives_one_client_per_writer_and_dict_batches() -> None:
    data = FederatedDataModule(
        small_corpus(), NaturalIdPartitioner(), batch_size=4, eval_batch_size=7, val_fraction=0.0
    )
    data.setup(seed=0, device=CPU)
    splits = small_corpus().load(0)
    assert data.num_clients == 6
    for writer in range(6):
        assert data.client_size(writer) == len(writer_windows(splits.train, writer))
    batches = list(data.client_batches(2, torch.Generator().manual_seed(0), epochs=1))
    assert all(set(batch) == {"tokens", "targets"} and batch["tokens"].shape[1:] == (10,) for batch in batches)
    read = torch.cat([torch.cat([b["tokens"], b["targets"][:, -1:]], 1) for b in batches])
    expected = writer_windows(splits.train, 2)
    assert len(read) == len(expected) and sorted(map(tuple, read.tolist())) == sorted(map(tuple, expected.tolist()))
    test = list(data.test_batches())
    assert [len(b["tokens"]) for b in test[:-1]] == [7] * (len(test) - 1)
    assert torch.equal(torch.cat([b["targets"] for b in test]), splits.test.windows[:, 1:])


@pytest.mark.parametrize(
    "settings",
    [
        dict(num_writers=0),
        dict(vocab_size=1),
        dict(seq_len=0),
        dict(order=0),
        dict(windows_per_writer=1),
        dict(concentration=0.0),
        dict(heterogeneity=1.5),
        dict(test_fraction=1.0),
        dict(vocab_size=100, order=4),
    ],
)
def test_bad_settings_are_refused(settings) -> None:
    with pytest.raises(ConfigError):
        small_corpus(**settings)
