"""A module's federated parameters and its buffers as views into contiguous flat buffers."""

import itertools

import torch
from torch import Tensor, nn

from lightfed.core.federated_weights import federated_parameters


def _flatten_into_views(tensors: list[Tensor], device: torch.device) -> Tensor:
    """Copies ``tensors`` into one flat buffer and makes each tensor's ``.data`` a view of it."""
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        raise TypeError(f"cannot flatten tensors of mixed dtypes {sorted(map(str, dtypes))}")
    dtype = dtypes.pop() if dtypes else torch.float32
    flat = torch.empty(sum(t.numel() for t in tensors), dtype=dtype, device=device)
    offset = 0
    for t in tensors:
        view = flat[offset : offset + t.numel()].view_as(t)
        view.copy_(t.data)
        t.data = view
        offset += t.numel()
    return flat


class FlatModule:
    """Zero-copy flat views of a module's federated parameters (those that train: ``federated_parameters``), their
    gradients and its floating-point buffers; frozen parameters stay as they are, outside every flat vector.

    Loading new weights is one ``copy_`` per buffer; integer buffers (e.g. ``num_batches_tracked``) are not part of
    the federated state and are restored to their initial values by ``load``. Autograd accumulates into the
    gradient views in place, so ``grads`` is the flat gradient after a backward pass.
    """

    def __init__(self, module: nn.Module, device: torch.device) -> None:
        module.to(device)
        buffers = [b for b in module.buffers() if b.is_floating_point()]
        self._int_buffers = [(b, b.detach().clone()) for b in module.buffers() if not b.is_floating_point()]
        trained: list[Tensor] = [p for _, p in federated_parameters(module)]
        self.params = _flatten_into_views(trained, device)
        self.buffers = _flatten_into_views(buffers, device)
        self.grads = torch.zeros_like(self.params)
        offsets = itertools.accumulate((p.numel() for p in trained), initial=0)  # one more than trained
        self._grad_views = [
            (p, self.grads[start : start + p.numel()].view_as(p)) for p, start in zip(trained, offsets, strict=False)
        ]
        self.zero_grad()

    def zero_grad(self) -> None:
        """Zeroes the flat gradient, re-attaching any view that something replaced (e.g. ``zero_grad(set_to_none)``)."""
        for p, view in self._grad_views:
            if p.grad is not view:
                p.grad = view
        self.grads.zero_()

    def load(self, params: Tensor, buffers: Tensor) -> None:
        """Copies global weights into the live module in place."""
        with torch.no_grad():
            self.params.copy_(params)
            self.buffers.copy_(buffers)
            for buffer, initial in self._int_buffers:
                buffer.copy_(initial)
