"""Layers of stacked clients: each client's rows of a weight ``[clients, ...]`` applied to its own examples."""

from typing import Any

import torch
from torch import Tensor


class _StackedLinear(torch.autograd.Function):
    """``x @ weight^T + bias`` of stacked clients (``[clients, out, in]``, ``[clients, out]`` or None) on their
    examples ``x``: ``[clients, n, in]``, or folded, ``[clients * n, ..., in]`` (the output folded alike), whose
    backward pass computes the weight's gradient in the weight's own layout, ``grad^T @ x`` as ``F.linear``'s does:
    autograd's ``baddbmm`` gives it transposed, and turning it back took a quarter of a small MLP's step; folded
    examples are viewed per client inside, a node of the backward graph fewer on either side."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        stacked = x.reshape(len(weight), -1, x.shape[-1])
        transposed = weight.transpose(1, 2)
        out = torch.bmm(stacked, transposed) if bias is None else torch.baddbmm(bias.unsqueeze(1), stacked, transposed)
        return out if x.ndim == 3 and len(x) == len(weight) else out.reshape(*x.shape[:-1], weight.shape[1])

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors
        stacked, grad = x.reshape(len(weight), -1, x.shape[-1]), grad.reshape(len(weight), -1, weight.shape[1])
        # under autocast the forward computed in the output's dtype, as the backward does (each gradient then in its
        # tensor's dtype); in float32 the casts are no-ops
        computed = grad.dtype
        grad_x = torch.bmm(grad, weight.to(computed)).reshape(x.shape).to(x.dtype) if ctx.needs_input_grad[0] else None
        grad_weight = (
            torch.bmm(grad.transpose(1, 2), stacked.to(computed)).to(weight.dtype) if ctx.needs_input_grad[1] else None
        )
        grad_bias = grad.sum(1).to(weight.dtype) if ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


def stacked_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``x @ weight^T + bias`` of stacked clients (``_StackedLinear``): ``x`` ``[clients, n, in]`` or folded."""
    return _StackedLinear.apply(x, weight, bias)  # type: ignore[no-any-return]


def dropped_out(h: Tensor, p: float, generators: list[torch.Generator], counts: list[int] | None = None) -> Tensor:
    """``F.dropout(h[k], p)`` of each client ``k`` (0 < p), its mask drawn from ``generators[k]`` as ``F.dropout``
    draws one from torch's generator on the CPU (``bernoulli_(1 - p)`` of a tensor like the input, divided by 1 - p;
    nothing drawn for p 1); on a GPU, not ``F.dropout``'s masks, but each client's own all the same. ``counts``: the
    numbers of each row that are the client's own (the first; the rest pads, kept as they are)."""
    if p == 1:
        return h * torch.zeros((), device=h.device, dtype=h.dtype)
    noise = torch.ones_like(h) if counts is not None else torch.empty_like(h)
    for k, (row, generator) in enumerate(zip(noise, generators, strict=True)):
        (row if counts is None else row.view(-1)[: counts[k]]).bernoulli_(1 - p, generator=generator)
    return h * noise.div_(1 - p)
