"""One client's local training in one round without privacy; privacy mechanisms subclass it."""

from collections.abc import Iterator

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.messages import ClientPlan
from lightfed.core.training_loss import training_loss
from lightfed.data.module import Batch


class LocalSession:
    """One client's local training in one round: its batches, the gradient of a batch, a hook before each step.

    This base trains without privacy (shuffled batches, plain gradients); privacy mechanisms override what they change.
    """

    def __init__(self, context: LocalContext, plan: ClientPlan, generator: torch.Generator) -> None:
        self.context, self.plan, self.generator = context, plan, generator

    def batches(self) -> Iterator[Batch]:
        return self.context.data.client_batches(self.plan.client_id, self.generator, self.plan.epochs, self.plan.steps)

    def gradient(self, batch: Batch, batch_idx: int) -> Tensor:
        """Loss of ``batch`` at the current parameters; its plain gradient lands in ``context.flat.grads``."""
        context = self.context
        with context.autocast():
            loss = training_loss(context.module, batch, batch_idx)
        context.flat.zero_grad()
        context.module.on_before_backward(loss)
        context.backward(loss)
        context.module.on_after_backward()
        return loss

    def before_step(self, grad: Tensor) -> None:
        """Called with the step's final flat gradient (after the plan's rule), before the optimizer step."""

    def finish(self) -> None:
        """Called after the client's last step."""
