"""The max-norm of a large vector at memory speed."""

import torch
from torch import Tensor


def max_abs(tensor: Tensor) -> Tensor:
    """max|x| (0 for an empty tensor) as a 0-dim tensor, from ``torch.aminmax``: on a CPU torch's inf-norm and
    ``abs().max()`` are not vectorised (9.5M floats, one thread: 24 and 15 ms against 1.4 ms)."""
    if tensor.numel() == 0:
        return tensor.new_zeros(())
    low, high = torch.aminmax(tensor)
    return torch.maximum(high, -low)
