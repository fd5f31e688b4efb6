"""Fixed-point quantization of client contributions for secure aggregation: [-c, c] onto the integers 0 .. 2^b - 1."""

import torch
from torch import Tensor


def quantize(values: Tensor, clip: Tensor, bits: int, generator: torch.Generator | None) -> Tensor:
    """``values`` clipped to [-clip, clip] (per coordinate) and mapped linearly onto 0 .. 2^bits - 1, as int64;
    rounded stochastically (floor(v + U), U ~ U[0, 1) from ``generator``: unbiased) or, without a generator, to the
    nearest integer."""
    levels = 2**bits - 1
    scaled = (torch.minimum(torch.maximum(values, -clip), clip) + clip) * (levels / (2 * clip))
    if generator is None:
        rounded = torch.round(scaled)
    else:
        rounded = torch.floor(scaled + torch.rand(scaled.shape, generator=generator, dtype=scaled.dtype))
    return rounded.clamp_(0, levels).to(torch.int64)


def dequantize_sum(total: Tensor, clip: Tensor, bits: int, clients: int) -> Tensor:
    """The real sum of ``clients`` contributions whose quantized values add up to ``total``: the inverse of
    ``quantize``'s affine map, applied to a sum."""
    return total.to(torch.float64) * (2 * clip / (2**bits - 1)) - clients * clip


def step_size(clip: float, bits: int) -> float:
    """One quantization level, 2c / (2^b - 1): a client's rounding error per coordinate is below it (stochastic)
    or at most half of it (nearest), for values within [-c, c]."""
    return 2 * clip / (2**bits - 1)
