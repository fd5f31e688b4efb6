"""Clients' example indices in one flat array (``ClientGroups``), and held-out shares drawn for every client at once
(``data.holdout_draws: vectorized``)."""

import numpy as np
import pytest
import torch

from lightfed.data import Synthetic
from lightfed.data.client_groups import ClientGroups
from lightfed.data.module import FederatedDataModule
from lightfed.data.validation import held_count, split_each
from lightfed.errors import ConfigError


def test_groups_are_views_of_one_flat_array():
    groups = ClientGroups.of([np.array([5, 6]), np.array([], dtype=np.int64), np.array([7, 8, 9])])
    assert groups.flat.tolist() == [5, 6, 7, 8, 9] and groups.offsets.tolist() == [0, 2, 2, 5]
    assert [g.tolist() for g in groups] == [[5, 6], [], [7, 8, 9]] and groups.sizes.tolist() == [2, 0, 3]
    assert groups[-1].tolist() == [7, 8, 9] and np.shares_memory(groups[2], groups.flat)
    assert [g.tolist() for g in groups[1:]] == [[], [7, 8, 9]]
    with pytest.raises(IndexError):
        groups[3]
    tensors = groups.to_tensor("cpu")
    assert tensors[2].dtype == torch.long and tensors[2].tolist() == [7, 8, 9] and ClientGroups.of(groups) is groups


def _vectorized(groups, fraction, strata=None, seed=0):
    return split_each(groups, fraction, np.random.default_rng(seed), strata, draws="vectorized")


def test_vectorized_draws_split_every_group_as_the_per_client_draws_do():
    """Each group: held_count of it held out, the rest kept, both in the group's order; strata within one of their
    share; sizes 1 and 0 keep everything."""
    rng = np.random.default_rng(1)
    groups = [np.sort(rng.choice(1000, size, replace=False)) for size in [0, 1, 2, 3, 7, 10, 31]]
    strata = rng.integers(0, 3, 1000)
    kept, held = _vectorized(groups, 0.3, strata)
    for group, k, h in zip(groups, kept, held, strict=True):
        assert len(h) == held_count(len(group), 0.3) and np.array_equal(np.sort(np.concatenate([k, h])), group)
        assert np.all(np.diff(k) > 0) and np.all(np.diff(h) > 0)  # the group's order (it is sorted)
        share = np.bincount(strata[group], minlength=3) * len(h) / max(len(group), 1)
        assert np.all(np.abs(np.bincount(strata[h], minlength=3) - share) < 1)
    per_client_kept, per_client_held = split_each(groups, 0.3, np.random.default_rng(0), strata)
    assert (
        per_client_held.sizes.tolist() == held.sizes.tolist() and kept.sizes.tolist() == per_client_kept.sizes.tolist()
    )
    nothing_kept, nothing_held = _vectorized(groups, 0.0, strata)
    assert nothing_held.sizes.sum() == 0 and np.array_equal(nothing_kept.flat, np.concatenate(groups))


def test_vectorized_draws_pick_every_member_of_a_stratum_equally_often():
    """3000 copies of one group of 5 (strata a a a b b), 2 held out: one a and one b each time, each a a third of the
    time and each b half of it. Without the random key the same members would be picked every time."""
    copies = 3000
    kept, held = _vectorized([np.arange(5)] * copies, 0.4, np.array([0, 0, 0, 1, 1]))
    picks = held.flat.reshape(copies, 2)
    assert np.all(picks[:, 0] < 3) and np.all(picks[:, 1] >= 3)
    frequency = np.bincount(picks.reshape(-1), minlength=5) / copies
    assert np.allclose(frequency, [1 / 3, 1 / 3, 1 / 3, 1 / 2, 1 / 2], atol=0.04)
    assert not np.array_equal(
        _vectorized([np.arange(5)] * 10, 0.4, seed=1)[1].flat, _vectorized([np.arange(5)] * 10, 0.4)[1].flat
    )


def test_a_data_module_with_vectorized_holdout_draws_holds_out_each_clients_share():
    def data(draws: str) -> FederatedDataModule:
        module = FederatedDataModule(
            Synthetic(num_clients=30, client_size=12, dim=3), client_val_fraction=0.25, holdout_draws=draws
        )
        module.setup(0, torch.device("cpu"))
        return module

    vectorized, per_client = data("vectorized"), data("per_client")
    assert len(vectorized.val_indices) == len(per_client.val_indices) == 30  # 1 of each client's 10 training
    for client in range(30):
        trained, evaluated = vectorized._client_indices[client], vectorized.client_val_indices(client)
        assert len(trained) == 7 and len(evaluated) == 2  # 9 left: 2 held out (round(2.25))
        assert len(np.intersect1d(trained.numpy(), vectorized.val_indices.numpy())) == 0
        assert len(np.intersect1d(trained.numpy(), evaluated.numpy())) == 0
        assert set(trained.tolist()) | set(evaluated.tolist()) <= set(range(10 * client, 10 * client + 10))
    assert not torch.equal(vectorized.val_indices, per_client.val_indices)  # other draws
    with pytest.raises(ConfigError, match="data.holdout_draws must be one of per_client, vectorized, got 'fast'"):
        FederatedDataModule(holdout_draws="fast")
