import torch
from torch import nn

from lightfed.core.flat import FlatModule


def test_parameters_and_float_buffers_are_views_of_flat_buffers():
    module = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    before = torch.cat([p.detach().reshape(-1).clone() for p in module.parameters()])
    flat = FlatModule(module, torch.device("cpu"))
    assert torch.equal(flat.params, before) and flat.params.numel() == 3 * 2 + 2 + 2 + 2
    assert flat.buffers.numel() == 4  # running mean and var; num_batches_tracked is not federated state
    flat.params.zero_()
    assert all(torch.count_nonzero(p) == 0 for p in module.parameters())


def test_load_copies_in_place_and_restores_integer_buffers():
    module = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    flat = FlatModule(module, torch.device("cpu"))
    weight = module[0].weight
    module.train()(torch.randn(4, 3))  # moves running stats and num_batches_tracked
    flat.load(torch.arange(flat.params.numel(), dtype=torch.float32), torch.ones(4))
    assert module[0].weight is weight and module[0].weight.flatten().tolist() == [0, 1, 2, 3, 4, 5]
    assert module[1].running_mean.tolist() == [1.0, 1.0] and module[1].num_batches_tracked.item() == 0
