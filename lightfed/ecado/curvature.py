"""Hutchinson estimates of a loss's Hessian diagonal (and its mean, trace / d) from Hessian-vector products."""

from collections.abc import Iterable
from typing import cast

import torch
from lightning import LightningModule
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.logged_values import LoggedValues


def hutchinson_diagonal(loss: Tensor, params: list[Tensor], probes: int, generator: torch.Generator) -> Tensor:
    """E_z[z * (H z)] over ``probes`` Rademacher vectors z, flat over ``params`` (H: the Hessian of ``loss``).

    Its mean is Hutchinson's estimate of trace(H) / d. Costs one double backward pass per probe.
    """
    if probes < 1:
        raise ValueError(f"probes must be >= 1, got {probes}")
    grads = torch.autograd.grad(loss, params, create_graph=True)
    total = torch.zeros(sum(p.numel() for p in params), device=loss.device)
    for probe in range(probes):
        z = torch.randint(0, 2, total.shape, generator=generator, dtype=torch.float32).mul_(2).sub_(1).to(total)
        parts = [part.view_as(p) for part, p in zip(z.split([p.numel() for p in params]), params, strict=True)]
        hz = torch.autograd.grad(grads, params, grad_outputs=parts, retain_graph=probe < probes - 1)
        for sum_part, z_part, h in zip(total.split([p.numel() for p in params]), parts, hz, strict=True):
            sum_part.view_as(h).addcmul_(z_part, h)
    return total / probes


def module_hessian_diagonal(
    module: LightningModule, batches: Iterable, probes: int, generator: torch.Generator
) -> Tensor:
    """Hutchinson diagonal of ``training_step``'s loss averaged over ``batches``, flat over all parameters (zero for
    frozen ones), in eval mode so that no buffer (e.g. BatchNorm statistics) changes."""
    params = list(module.parameters())
    trainable = [p for p in params if p.requires_grad]
    mask = torch.cat([torch.full((p.numel(),), p.requires_grad, device=p.device) for p in params])
    was_training = module.training
    module.eval()
    total, count = torch.zeros(mask.numel(), device=mask.device), 0
    with LoggedValues().attached(module):
        for index, batch in enumerate(batches):
            output = module.training_step(batch, index)
            loss = output["loss"] if isinstance(output, dict) else output
            total[mask] += hutchinson_diagonal(cast(Tensor, loss), list(trainable), probes, generator)
            count += 1
    module.train(was_training)
    if count == 0:
        raise ValueError("no batches to estimate the curvature on")
    return total / count


def client_hessian_diagonal(
    context: LocalContext, client_id: int, batches: int, probes: int, seed: int, examples: int | None = None
) -> Tensor:
    """``module_hessian_diagonal`` of the client's live module on ``batches`` of its own shuffled batches, or with
    ``examples`` on ``batches`` random subsets of that many of its examples (a smaller sample set: an estimate costs
    about ``examples`` / batch size of one on whole batches)."""
    generator = torch.Generator().manual_seed(seed)
    data = context.data
    if examples is None:
        samples: Iterable = data.client_batches(client_id, generator, steps=batches)
    else:
        size = data.client_size(client_id)
        samples = (
            data.client_subset(client_id, torch.randperm(size, generator=generator)[:examples], generator)
            for _ in range(batches)
        )
    return module_hessian_diagonal(context.module, samples, probes, generator)
