"""FedRep's local schedule (Collins et al. 2021): the personal head first, with the body frozen, then the body."""

from torch import Tensor

from lightfed.core.local_rule import LocalRule
from lightfed.core.requirements import Requirements
from lightfed.local.personal_layers import PersonalLayers


class HeadThenBody(PersonalLayers):
    """``PersonalLayers`` whose first ``head_steps`` steps move only the personal head (the body's gradient zeroed)
    and whose remaining steps move only the body (the head's gradient zeroed). Freezing by a zero gradient needs
    plain SGD without weight decay (momentum or decay would still move a frozen coordinate)."""

    def __init__(
        self,
        params_mask: Tensor,
        buffers_mask: Tensor,
        personal: Tensor | None,
        personal_buffers: Tensor | None,
        head_steps: int,
        inner: LocalRule | None = None,
    ) -> None:
        super().__init__(params_mask, buffers_mask, personal, personal_buffers, inner)
        self.head_steps, self.steps = head_steps, 0

    @property
    def requirements(self) -> Requirements:  # type: ignore[override]
        return super().requirements | Requirements(plain_sgd=True, no_weight_decay=True)

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        super().adjust(grad, params)
        head = self.params_mask.to(grad.device)
        grad.masked_fill_(~head if self.steps < self.head_steps else head, 0.0)
        self.steps += 1
