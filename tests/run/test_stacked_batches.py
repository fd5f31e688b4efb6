"""A chunk's examples, drawn at once as indices into an in-memory dataset and gathered a block of steps at a time, are
the batches each client's one-at-a-time training draws."""

import pytest
import torch

from lightfed.data.augmentation import Augmentation
from lightfed.run.stacked_batches import GATHERED_BYTES, GatheredBatches, ListedBatches
from lightfed.run.vectorized_clients import VectorizedClients
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
        for size, group in VectorizedClients._groups(listed.sizes, step):
            expected, batch = listed.stacked(step, group), gathered.stacked(step, group)
            assert batch[0].shape[:2] == (len(group), size)
            assert all(torch.equal(a, b) and b.is_contiguous() for a, b in zip(expected, batch, strict=True))


def test_augmented_batches_are_not_gathered_around_the_augmentation():
    data = small_data()
    data.augmentation = Augmentation(horizontal_flip=True)
    data.setup(seed=0, device=torch.device("cpu"))
    assert data.plain_tensors is None
