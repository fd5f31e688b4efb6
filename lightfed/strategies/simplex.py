"""The Euclidean projection onto the probability simplex."""

import torch
from torch import Tensor


def project_to_simplex(v: Tensor) -> Tensor:
    """argmin over {x : x >= 0, sum x = 1} of ||x - v||_2 (Duchi, Shalev-Shwartz, Singer, Chandra 2008, Fig. 1):
    with u = v sorted in decreasing order and rho = max{j : u_j - (sum_{i<=j} u_i - 1) / j > 0},
    x = max(v - theta, 0) for theta = (sum_{i<=rho} u_i - 1) / rho. A new tensor of v's dtype."""
    u = v.sort(descending=True).values
    excess = u.cumsum(0) - 1
    j = torch.arange(1, len(v) + 1, dtype=v.dtype, device=v.device)
    rho = int((u - excess / j > 0).nonzero().max())  # 0-based: the condition holds for j = 1 at least
    return (v - excess[rho] / (rho + 1)).clamp(min=0)
