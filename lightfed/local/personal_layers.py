"""A client's own layers (FedPer, FedRep, FedBN): loaded from its store before local training, reported after it."""

from typing import Any

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule
from lightfed.local.around_inner import AroundInner


class PersonalLayers(AroundInner):
    """Before the first step, writes the client's own values of its personal coordinates (``params_mask``,
    ``buffers_mask``) into the live module (none yet: it keeps the global model's); reports their values after the last
    step as ``personal`` and ``personal_buffers``. ``inner``: the strategy's own rule, which it runs unchanged (started
    from the model the client starts from)."""

    def __init__(
        self,
        params_mask: Tensor,
        buffers_mask: Tensor,
        personal: Tensor | None,
        personal_buffers: Tensor | None,
        inner: LocalRule | None = None,
    ) -> None:
        super().__init__(inner)
        self.vectorizes = inner is None or inner.vectorizes
        self.params_mask, self.buffers_mask = params_mask, buffers_mask
        self.personal, self.personal_buffers = personal, personal_buffers

    def start(self, params: Tensor, context: LocalContext) -> None:
        self.flat = flat = context.flat
        with torch.no_grad():
            if self.personal is not None:
                flat.params[self.params_mask.to(flat.params.device)] = self.personal.to(flat.params.device)
            if self.personal_buffers is not None:
                flat.buffers[self.buffers_mask.to(flat.buffers.device)] = self.personal_buffers.to(flat.buffers.device)
        if self.inner is not None:
            self.inner.start(flat.params.clone(), context)

    def report(self) -> dict[str, Any]:
        flat = self.flat
        return {
            **super().report(),
            "personal": flat.params[self.params_mask.to(flat.params.device)].clone(),
            "personal_buffers": flat.buffers[self.buffers_mask.to(flat.buffers.device)].clone(),
        }
