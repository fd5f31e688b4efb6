"""A chunk's examples, drawn at once as indices into an in-memory dataset and gathered step by step, are the batches
each client's one-at-a-time training draws."""

import pytest
import torch

from lightfed.data.augmentation import Augmentation
from lightfed.run.stacked_batches import GatheredBatches, ListedBatches
from lightfed.run.vectorized_clients import VectorizedClients
from tests.conftest import small_data

CLIENTS = range(8)


@pytest.mark.parametrize("plan", [{"epochs": 2}, {"steps": 11}], ids=["epochs", "steps"])
def test_gathered_batches_are_the_ones_each_client_draws(plan):
    data = small_data()
    data.setup(seed=0, device=torch.device("cpu"))
    tensors = data.plain_tensors
    assert tensors is not None
    listed = ListedBatches([list(data.client_batches(c, torch.Generator().manual_seed(c), **plan)) for c in CLIENTS])
    epochs, steps = plan.get("epochs"), plan.get("steps")
    gathered = GatheredBatches(tensors, [(c, c, epochs, steps) for c in CLIENTS])  # seeded as the listed ones
    assert gathered.sizes == listed.sizes
    held = [value for value in vars(gathered).values() if isinstance(value, (torch.Tensor, tuple))]
    assert all(isinstance(v, torch.Tensor) and not v.is_floating_point() for v in held)  # indices, not the examples
    assert len({tuple(sizes) for sizes in listed.sizes}) > 1  # ragged: partial batches at different steps
    for step in range(max(len(sizes) for sizes in listed.sizes)):
        for size, group in VectorizedClients._groups(listed.sizes, step):
            expected, batch = listed.stacked(step, group), gathered.stacked(step, group)
            assert batch[0].shape[:2] == (len(group), size)
            assert all(torch.equal(a, b) for a, b in zip(expected, batch, strict=True))


def test_augmented_batches_are_not_gathered_around_the_augmentation():
    data = small_data()
    data.augmentation = Augmentation(horizontal_flip=True)
    data.setup(seed=0, device=torch.device("cpu"))
    assert data.plain_tensors is None
