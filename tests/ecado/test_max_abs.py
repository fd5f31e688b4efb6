"""max_abs against torch's own max-norm."""

import pytest
import torch

from lightfed.ecado.max_abs import max_abs


@pytest.mark.parametrize("shift", [-3.0, 0.0, 3.0])  # the largest |x| negative, either, positive
def test_equals_the_inf_norm_exactly(shift):
    x = torch.randn(10_001, generator=torch.Generator().manual_seed(0)) + shift
    assert max_abs(x).item() == torch.linalg.vector_norm(x, float("inf")).item()


def test_by_hand_empty_and_nan():
    assert max_abs(torch.tensor([1.0, -5.0, 2.0])).item() == 5.0
    assert max_abs(torch.tensor([[-1.0], [0.5]])).item() == 1.0
    assert max_abs(torch.empty(0)).item() == 0.0
    assert max_abs(torch.tensor([1.0, float("nan")])).isnan()
