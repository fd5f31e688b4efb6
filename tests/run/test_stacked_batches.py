"""A chunk's examples, drawn at once as indices into an in-memory dataset and gathered a block of steps at a time, are
the batches each client's one-at-a-time training draws."""

import pytest
import torch

from lightfed.data.augmentation import Augmentation
from lightfed.run.stacked_batches import GATHERED_BYTES, GatheredBatches, ListedBatches
from lightfed.run.stacked_schedule import groups_at, row_calls
from tests.conftest import small_data

CLIENTS = range(8)


@pytest.mark.parametrize("block", [1, 3, None], ids=["a step", "blocks", "whole"])
@pytest.mark.parametrize(
    ("clients", "plan"),
    [
        (CLIENTS, {"epochs": 2}),
        (CLIENTS, {"steps": 11}),
        ([3] * 8, {"epochs": 1}),  # alike: one client drawn with 8 seeds, a partial batch last (laid out by padding)
        ([3] * 8, {"epochs": 2}),  # alike, a partial batch in each pass
    ],
    ids=["ragged-epochs", "ragged-steps", "alike-epoch", "alike-epochs"],
)
def test_gathered_batches_are_the_ones_each_client_draws(clients, plan, block):
    data = small_data()
    data.setup(seed=0, device=torch.device("cpu"))
    tensors = data.plain_tensors
    assert tensors is not None
    listed = ListedBatches(
        [list(data.client_batches(c, torch.Generator().manual_seed(s), **plan)) for s, c in enumerate(clients)]
    )
    epochs, steps = plan.get("epochs"), plan.get("steps")
    step_bytes = len(clients) * data.batch_size * tensors.example_bytes  # a step's examples, padded
    budget = GATHERED_BYTES if block is None else block * step_bytes + step_bytes // 2  # (1: a step at a time)
    gathered = GatheredBatches(tensors, [(c, s, epochs, steps) for s, c in enumerate(clients)], budget)
    assert gathered.sizes == listed.sizes
    partial = [sizes for sizes in listed.sizes if sizes[-1] < data.batch_size]
    assert partial and (len({tuple(sizes) for sizes in listed.sizes}) > 1) == (clients == CLIENTS)
    steps = max(len(sizes) for sizes in listed.sizes)
    assert gathered.block == block if block is not None else gathered.block >= steps
    for step in range(steps):
        for size, group in groups_at(listed.sizes, step):
            expected, batch = listed.stacked(step, group), gathered.stacked(step, group)
            assert batch[0].shape[:2] == (len(group), size)
            assert all(torch.equal(a, b) and b.is_contiguous() for a, b in zip(expected, batch, strict=True))


@pytest.mark.parametrize("kind", ["listed", "gathered"])
def test_a_range_of_clients_rows_are_their_batches_of_one_size_or_padded_with_each_ones_size(kind):
    """``rows(step, at, size)``: the batches of the clients ``at`` at ``step``, of ``size`` examples, or padded to the
    widest (``size`` None) with each client's own examples first and its size in ``counts``."""
    data = small_data()
    data.setup(seed=0, device=torch.device("cpu"))
    listed = ListedBatches([list(data.client_batches(c, torch.Generator().manual_seed(c), epochs=1)) for c in CLIENTS])
    draws = [(c, c, 1, None) for c in CLIENTS]
    batches = listed if kind == "listed" else GatheredBatches(data.plain_tensors, draws)  # type: ignore[arg-type]
    step = len(listed.sizes[0]) - 1  # client 0's last, partial batch; clients 1-3 have a full one there
    (x, y), counts = batches.rows(step, slice(0, 4), None)
    assert counts.tolist() == [listed.sizes[k][step] for k in range(4)] and len(set(counts.tolist())) > 1
    assert x.shape[:2] == (4, data.batch_size)
    for row, k in enumerate(range(4)):
        own_x, own_y = listed.batches[k][step]
        assert torch.equal(x[row, : len(own_x)], own_x) and torch.equal(y[row, : len(own_y)], own_y)
    full = [k for k in CLIENTS if listed.sizes[k][0] == data.batch_size][:2]
    (x, y), counts = batches.rows(0, slice(full[0], full[0] + 1), data.batch_size)
    assert torch.equal(x[0], listed.batches[full[0]][0][0]) and counts.tolist() == [data.batch_size]


def test_the_calls_of_a_step_are_the_first_clients_padded_or_a_call_per_group_of_clients_one_after_another():
    first = [(10, [0, 1, 2]), (3, [3]), (7, [4, 5])]
    assert row_calls(first) == [(slice(0, 6), None, first)]
    later = [(10, [2, 3]), (4, [5, 6])]  # not the first ones: a call per group, each on views of its rows
    assert row_calls(later) == [(slice(2, 4), 10, [(10, [2, 3])]), (slice(5, 7), 4, [(4, [5, 6])])]
    assert row_calls([(10, [1, 3])]) is None  # not one after another: vmap's or the batched matmuls' groups


def test_augmented_batches_are_not_gathered_around_the_augmentation():
    data = small_data()
    data.augmentation = Augmentation(horizontal_flip=True)
    data.setup(seed=0, device=torch.device("cpu"))
    assert data.plain_tensors is None
