"""A client's training loss at the model it received, sent back to the server (q-FedAvg's F_k(w^t), agnostic FL's
L_k(w))."""

from typing import Any

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.local_rule import LocalRule
from lightfed.core.logged_values import LoggedValues
from lightfed.core.requirements import Requirements, Sent
from lightfed.core.training_loss import training_loss
from lightfed.local.around_inner import AroundInner

LOSS_AT_GLOBAL = "loss_at_global"  # the key of ``ClientUpdate.report`` that holds it
SENDS_LOSS = Requirements(sends=frozenset({Sent(LOSS_AT_GLOBAL, "data")}))


def loss_at_received(context: LocalContext, client_id: int, seed: int) -> float:
    """The mean of ``training_step``'s loss over every training example of the client, at the module's current
    (received) weights, in eval mode and without gradients, read in order in batches of ``data.eval_batch_size``
    (augmented with a generator seeded ``seed`` where the data augments). Leaves the module in train mode."""
    module, data = context.module, context.data
    size, batch_size = data.client_size(client_id), data.eval_batch_size
    generator = torch.Generator().manual_seed(seed)
    total = 0.0
    module.eval()
    with torch.no_grad(), LoggedValues().attached(module):
        for batch_idx, start in enumerate(range(0, size, batch_size)):
            positions = torch.arange(start, min(start + batch_size, size))
            batch = data.client_subset(client_id, positions, generator)
            with context.autocast():
                loss = training_loss(module, batch, batch_idx)
            total += float(loss) * len(positions)
    module.train()
    return total / size


class LossAtGlobal(AroundInner):
    """Before the client's first local step, its training loss at the received global weights
    (``loss_at_received``), reported as ``loss_at_global``; the local steps are ``inner``'s (None: plain steps)."""

    vectorizes = False  # its start reads the live module

    def __init__(self, client_id: int, seed: int, inner: LocalRule | None = None) -> None:
        super().__init__(inner)
        self.client_id, self.seed = client_id, seed
        self.loss: float | None = None

    @property
    def requirements(self) -> Requirements:  # type: ignore[override]
        return super().requirements | SENDS_LOSS

    def start(self, params: Tensor, context: LocalContext) -> None:
        self.loss = loss_at_received(context, self.client_id, self.seed)
        if self.inner is not None:
            self.inner.start(params, context)

    def report(self) -> dict[str, Any]:
        assert self.loss is not None, "report after start"
        return {**super().report(), LOSS_AT_GLOBAL: self.loss}
