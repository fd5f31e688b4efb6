"""APFL's local steps (Deng et al. 2020): a personal model v trained through its mixture with the local model w."""

from typing import Any

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule


class APFLMixing(LocalRule):
    """Beside each plain step of the local model w, on the same batch:

        v <- v - lr alpha grad F(alpha v + (1 - alpha) w)
        alpha <- alpha - alpha_lr <v - w, grad F(alpha v + (1 - alpha) w)>   (with ``alpha_lr``; clipped to [0, 1])

    both at the step's w and v. The mixture's gradient is a second gradient of the batch (``recompute_gradient``);
    the step's own gradient and the module's buffers are restored after it. ``personal`` None starts v from the
    global model. Reports v as ``personal``, the buffers w ends with as ``personal_buffers`` and ``alpha``."""

    gradients_per_step = 2
    vectorizes = True  # the mixture is its second point, evaluated for many clients at once

    def __init__(self, personal: Tensor | None, alpha: float, alpha_lr: float | None = None) -> None:
        self.personal, self.alpha, self.alpha_lr = personal, alpha, alpha_lr

    def start(self, params: Tensor, context: LocalContext) -> None:
        self.context = context
        self.v = params.clone() if self.personal is None else self.personal.to(params.device).clone()
        self._grad, self._params = torch.empty_like(params), torch.empty_like(params)
        self._buffers = torch.empty_like(context.flat.buffers)

    def second_point(self, params: Tensor, grad: Tensor) -> Tensor:
        """The mixture alpha v + (1 - alpha) w."""
        return params.mul(1 - self.alpha).add_(self.v, alpha=self.alpha)

    def at_second_point(self, grad: Tensor, params: Tensor, lr: float) -> None:
        alpha = self.alpha
        if self.alpha_lr is not None:
            moved = alpha - self.alpha_lr * float(torch.dot(self.v - params, grad))
            self.alpha = min(max(moved, 0.0), 1.0)
        self.v.sub_(grad, alpha=lr * alpha)

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        context = self.context
        with torch.no_grad():
            self._grad.copy_(grad)
            self._params.copy_(params)
            self._buffers.copy_(context.flat.buffers)
            params.copy_(self.second_point(params, grad))
        context.recompute_gradient()  # grad: the gradient at the mixture
        with torch.no_grad():
            self.at_second_point(grad, self._params, context.lr)
            params.copy_(self._params)
            grad.copy_(self._grad)
            context.flat.buffers.copy_(self._buffers)

    def report(self) -> dict[str, Any]:
        return {
            "personal": self.v,
            "personal_buffers": self.context.flat.buffers.clone(),
            "alpha": torch.tensor(self.alpha, dtype=torch.float64),
        }
