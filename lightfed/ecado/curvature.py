"""Estimates of a loss's Hessian diagonal (and its mean, trace / d): Hutchinson's from Hessian-vector products, or
the diagonal empirical Fisher from the training steps' own gradients."""

from collections.abc import Iterable
from typing import Literal, cast

import torch
from lightning import LightningModule
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.logged_values import LoggedValues

CurvatureEstimate = Literal["hutchinson", "squared_gradients"]


def probe_generator(generator: torch.Generator, device: torch.device) -> torch.Generator:
    """``generator`` itself for probes on the CPU; on an accelerator a generator there, seeded from it: drawing a
    probe on the CPU and copying it over cost more than the Hessian-vector product on a GPU (43 ms for VGG-11's 9.5 M
    weights on one core)."""
    if device.type == "cpu" or device.type == generator.device.type:
        return generator
    return torch.Generator(device=device).manual_seed(int(torch.randint(2**62, (1,), generator=generator)))


def hutchinson_diagonal(loss: Tensor, params: list[Tensor], probes: int, generator: torch.Generator) -> Tensor:
    """E_z[z * (H z)] over ``probes`` Rademacher vectors z, flat over ``params`` (H: the Hessian of ``loss``).

    Its mean is Hutchinson's estimate of trace(H) / d. Costs one double backward pass per probe.
    """
    if probes < 1:
        raise ValueError(f"probes must be >= 1, got {probes}")
    grads = torch.autograd.grad(loss, params, create_graph=True)
    total = torch.zeros(sum(p.numel() for p in params), device=loss.device)
    draws = probe_generator(generator, total.device)
    for probe in range(probes):
        z = torch.randint(0, 2, total.shape, generator=draws, device=total.device, dtype=torch.float32).mul_(2).sub_(1)
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
    trainable: list[Tensor] = [p for p in params if p.requires_grad]
    frozen = len(trainable) < len(params)
    mask = torch.cat([torch.full((p.numel(),), p.requires_grad, device=p.device) for p in params]) if frozen else None
    was_training = module.training
    module.eval()
    total, count = torch.zeros(sum(p.numel() for p in params), device=params[0].device), 0
    with LoggedValues().attached(module):
        for index, batch in enumerate(batches):
            output = module.training_step(batch, index)
            loss = output["loss"] if isinstance(output, dict) else output
            diagonal = hutchinson_diagonal(cast(Tensor, loss), trainable, probes, generator)
            if mask is None:
                total += diagonal
            else:
                total[mask] += diagonal
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


class SquaredGradients:
    """The diagonal empirical Fisher from the mini-batch gradients of a client's own training steps, no extra pass:
    B x the mean over the steps of g * g (B the batch size). With B = 1 it is the mean squared per-example gradient,
    the empirical Fisher, which equals the Hessian of a well-specified likelihood at its optimum in expectation; with
    larger batches it is that where the batch gradients are mostly noise, and above it by (B - 1) x the mean
    gradient's square where they are not. Not a curvature where the gradients are not a likelihood's noise: on
    noise-free quadratics it is B x the squared gradient, far above the Hessian, and the circuit then diverges."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.total: Tensor | None = None
        self.count = 0

    def add(self, grad: Tensor) -> None:
        """Adds one step's (raw) gradient."""
        self.total = grad.square() if self.total is None else self.total.addcmul_(grad, grad)
        self.count += 1

    def estimate(self) -> Tensor:
        if self.total is None:
            raise ValueError("no training step to estimate the curvature from")
        return self.total * (self.batch_size / self.count)


class ClientCurvature:
    """A client's Hessian-diagonal estimate in its local rule: none (``batches`` 0), Hutchinson's at the global model
    before it trains (``client_hessian_diagonal``), or the squared gradients of its training steps
    (``SquaredGradients``)."""

    def __init__(
        self,
        batches: int,
        probes: int,
        examples: int | None,
        estimate: CurvatureEstimate,
        seed: int,
    ) -> None:
        self.batches, self.probes, self.examples, self.estimate, self.seed = batches, probes, examples, estimate, seed
        self.diagonal: Tensor | None = None
        self.squares: SquaredGradients | None = None

    def start(self, context: LocalContext, client_id: int) -> None:
        """Before the client's first step: the Hutchinson estimate, or an empty sum of squared gradients."""
        if self.batches > 0 and self.estimate == "squared_gradients":
            self.squares = SquaredGradients(context.data.batch_size)
        elif self.batches > 0:
            self.diagonal = client_hessian_diagonal(
                context, client_id, self.batches, self.probes, self.seed, self.examples
            )

    def observe(self, grad: Tensor) -> None:
        """A step's raw gradient, before anything changes it."""
        if self.squares is not None:
            self.squares.add(grad)

    def result(self) -> Tensor | None:
        """The estimate, or None when the client makes none."""
        return self.diagonal if self.squares is None else self.squares.estimate()
