"""Ditto's personal update (Li et al. 2021): the client's own model trained on its data, pulled toward the global one."""

from typing import Any

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule, PriorSteps
from lightfed.core.logged_values import LoggedValues
from lightfed.core.training_loss import training_loss
from lightfed.errors import ConfigError
from lightfed.local.around_inner import AroundInner
from lightfed.local.proximal import ProximalTerm


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
        self.vectorizes = inner is None or inner.vectorizes  # the personal steps are prior steps, taken vectorized
        self.report_values: dict[str, Tensor] | None = None

    def prior_steps(self, params: Tensor) -> PriorSteps:
        personal = params if self.personal is None else self.personal.to(params.device)
        buffers = None if self.personal_buffers is None else self.personal_buffers.to(params.device)
        pull = ProximalTerm(self.lam, anchor=params)
        return PriorSteps(personal, buffers, pull, self.seed, self.epochs, self.steps, self.lr)

    def prior_stepped(self, params: Tensor, buffers: Tensor) -> None:
        self.report_values = {"personal": params, "personal_buffers": buffers}

    def start(self, params: Tensor, context: LocalContext) -> None:
        if self.report_values is None:
            self.report_values = self._personal_steps(self.prior_steps(params), params, context)
        if self.inner is not None:
            self.inner.start(params, context)

    def _personal_steps(self, prior: PriorSteps, params: Tensor, context: LocalContext) -> dict[str, Tensor]:
        """The personal model and buffers after ``prior``'s steps on the client's live module, which it leaves with
        ``params`` and the buffers it found."""
        if context.scales_gradients:
            raise ConfigError(
                "Ditto's personal steps need unscaled gradients: use trainer.precision 32-true or bf16-mixed"
            )
        flat, module = context.flat, context.module
        start_buffers = flat.buffers.clone()
        lr = context.lr if prior.lr is None else prior.lr
        with torch.no_grad():
            flat.params.copy_(prior.params)
            if prior.buffers is not None and prior.buffers.numel() == flat.buffers.numel():
                flat.buffers.copy_(prior.buffers.to(flat.buffers.device))
        prior.rule.start(prior.params, context)
        module.train()  # an evaluation may have left it in eval mode
        torch.default_generator.manual_seed(prior.seed)  # the client's own training re-seeds it afterwards
        if flat.params.is_cuda:  # dropout on the GPU draws from CUDA's generator
            torch.cuda.manual_seed(prior.seed)
        generator = torch.Generator().manual_seed(prior.seed)
        with LoggedValues().attached(module):
            for batch_idx, batch in enumerate(
                context.data.client_batches(self.client_id, generator, prior.epochs, prior.steps)
            ):
                with context.autocast():
                    loss = training_loss(module, batch, batch_idx)
                flat.zero_grad()
                context.backward(loss)
                with torch.no_grad():
                    prior.rule.adjust(flat.grads, flat.params)
                    flat.params.sub_(flat.grads, alpha=lr)
        personal = {"personal": flat.params.clone(), "personal_buffers": flat.buffers.clone()}
        with torch.no_grad():
            flat.params.copy_(params)
            flat.buffers.copy_(start_buffers)
        flat.zero_grad()
        return personal

    def report(self) -> dict[str, Any]:
        assert self.report_values is not None, "report after start"
        return {**super().report(), **self.report_values}
