"""Work arrays kept between uses by name, so that large temporaries are not allocated afresh every time."""

import torch
from torch import Tensor


class Workspace:
    """Work arrays kept from one use to the next, by name: writing fresh memory costs several times what rewriting
    warm memory does (page faults on a CPU, the allocator on a GPU). A server solve keeps its (a, d) arrays in one
    from round to round; each client trainer has one for its local rules' (d,) arrays, kept from client to client."""

    def __init__(self) -> None:
        self._arrays: dict[str, Tensor] = {}

    def get(self, name: str, shape: torch.Size | tuple[int, ...], like: Tensor) -> Tensor:
        """The array ``name`` of ``shape`` with the dtype and device of ``like`` (its contents undefined)."""
        array = self._arrays.get(name)
        if array is None or array.shape != shape or array.dtype != like.dtype or array.device != like.device:
            self._arrays.pop(name, None)
            array = self._arrays[name] = like.new_empty(shape)
        return array
