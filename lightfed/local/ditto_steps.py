"""Ditto's personal update (Li et al. 2021): the client's own model trained on its data, pulled toward the global one."""

from typing import Any

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule
from lightfed.core.logged_values import LoggedValues
from lightfed.core.training_loss import training_loss
from lightfed.errors import ConfigError
from lightfed.local.around_inner import AroundInner


class DittoSteps(AroundInner):
    """Before the client's local training of the global model (left to ``inner``, the strategy's own rule, or plain
    steps), runs Ditto's personal steps on its personal model v (the global model ``w`` when it has none):

        v <- v - lr (grad F(v) + lam (v - w))

    over the client's batches (``epochs`` passes or ``steps`` batches, shuffled with ``seed``), with the plain gradient
    of ``training_step`` (nothing the module logs is kept). Reports v and the buffers it ends with as ``personal`` and
    ``personal_buffers``. ``lr`` None: the client's learning rate this round."""

    def __init__(
        self,
        client_id: int,
        personal: Tensor | None,
        personal_buffers: Tensor | None,
        lam: float,
        seed: int,
        epochs: int | None,
        steps: int | None,
        lr: float | None = None,
        inner: LocalRule | None = None,
    ) -> None:
        super().__init__(inner)
        self.client_id, self.personal, self.personal_buffers, self.lam = client_id, personal, personal_buffers, lam
        self.seed, self.epochs, self.steps, self.lr = seed, epochs, steps, lr

    def start(self, params: Tensor, context: LocalContext) -> None:
        if context.scales_gradients:
            raise ConfigError(
                "Ditto's personal steps need unscaled gradients: use trainer.precision 32-true or bf16-mixed"
            )
        flat, module = context.flat, context.module
        start_buffers = flat.buffers.clone()
        lr = context.lr if self.lr is None else self.lr
        with torch.no_grad():
            flat.params.copy_(params if self.personal is None else self.personal.to(params.device))
            if self.personal_buffers is not None and self.personal_buffers.numel() == flat.buffers.numel():
                flat.buffers.copy_(self.personal_buffers.to(flat.buffers.device))
        module.train()  # an evaluation may have left it in eval mode
        torch.default_generator.manual_seed(self.seed)  # the client's own training re-seeds it afterwards
        if flat.params.is_cuda:  # dropout on the GPU draws from CUDA's generator
            torch.cuda.manual_seed(self.seed)
        generator = torch.Generator().manual_seed(self.seed)
        with LoggedValues().attached(module):
            for batch_idx, batch in enumerate(
                context.data.client_batches(self.client_id, generator, self.epochs, self.steps)
            ):
                with context.autocast():
                    loss = training_loss(module, batch, batch_idx)
                flat.zero_grad()
                context.backward(loss)
                with torch.no_grad():
                    step = flat.grads.add(flat.params - params, alpha=self.lam)
                    flat.params.sub_(step, alpha=lr)
        self.report_values = {"personal": flat.params.clone(), "personal_buffers": flat.buffers.clone()}
        with torch.no_grad():
            flat.params.copy_(params)
            flat.buffers.copy_(start_buffers)
        flat.zero_grad()
        if self.inner is not None:
            self.inner.start(params, context)

    def report(self) -> dict[str, Any]:
        return {**super().report(), **self.report_values}
