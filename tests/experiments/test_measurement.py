"""What the benchmark scripts share: round periods, result lines and the synthetic CIFAR workload."""

import torch

from lightfed.experiments.measurement import emit, result_lines, round_periods
from lightfed.experiments.synthetic_cifar import SyntheticCIFAR


def test_round_periods_by_hand():
    assert round_periods(10.0, [11.0, 11.5, 13.5]) == [1.0, 0.5, 2.0]
    assert round_periods(10.0, []) == []


def test_result_lines_are_read_back_among_other_output(capsys):
    print("a line of the run's own")
    emit({"rank": 0, "round_times": [0.5, 0.25]})
    emit({"rank": 1, "round_times": []})
    lines = result_lines(capsys.readouterr().out)
    assert lines == [{"rank": 0, "round_times": [0.5, 0.25]}, {"rank": 1, "round_times": []}]


def test_synthetic_cifar_is_deterministic_from_the_seed_and_learnable():
    source = SyntheticCIFAR(num_train=200, num_test=8)
    a, b, c = source.load(0), source.load(0), source.load(1)
    assert a.train_x.shape == (200, 3, 32, 32) and a.test_x.shape == (8, 3, 32, 32) and a.num_classes == 10
    assert a.train_x.dtype == torch.float32 and int(a.train_y.max()) <= 9
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.train_y, b.train_y)
    assert not torch.equal(a.train_x, c.train_x)
    # each class is noise around its own pattern: the nearest class mean labels the training images
    means = torch.stack([a.train_x[a.train_y == k].mean(0) for k in range(10)])
    nearest = torch.cdist(a.train_x.flatten(1), means.flatten(1)).argmin(1)
    assert (nearest == a.train_y).float().mean() > 0.9
