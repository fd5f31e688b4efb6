"""The max-norm of a large vector at memory speed."""

import torch
from torch import Tensor


def max_abs(tensor: Tensor) -> Tensor:
    """max|x| of ``tensor`` (0 for an empty one) as a 0-dim tensor of its dtype and device, from ``torch.aminmax``."""
    if tensor.numel() == 0:
        return tensor.new_zeros(())
    low, high = torch.aminmax(tensor)
    return torch.maximum(high, -low)
