"""Estimates of a loss's Hessian diagonal (and its mean, trace / d): Hutchinson's from Hessian-vector products, its
mean from second differences of the loss alone, or the diagonal empirical Fisher from the training steps' own
gradients."""

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import torch
from lightning import LightningModule
from torch import Tensor

from lightfed.core.federated_weights import federated_parameters
from lightfed.core.local_context import LocalContext
from lightfed.core.logged_values import LoggedValues
from lightfed.core.training_loss import training_loss
from lightfed.core.workspace import Workspace
from lightfed.errors import ConfigError

CurvatureEstimate = Literal["hutchinson", "loss_differences", "squared_gradients"]
LOSS_DIFFERENCE_STEP = 1e-3  # s of ``loss_difference_curvature``, per coordinate (MeZO's and HiZOO's perturbation)


def probe_generator(generator: torch.Generator, device: torch.device) -> torch.Generator:
    """The generator to draw probes on ``device`` from: ``generator`` itself on the CPU (or on its own device), else a
    new generator on ``device`` seeded from one draw of ``generator``."""
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


@contextmanager
def _evaluating(module: LightningModule) -> Iterator[None]:
    """Eval mode, so that no buffer (e.g. BatchNorm statistics) changes, with ``self.log`` working without a
    trainer."""
    was_training = module.training
    module.eval()
    try:
        with LoggedValues().attached(module):
            yield
    finally:
        module.train(was_training)


def module_hessian_diagonal(
    module: LightningModule, batches: Iterable, probes: int, generator: torch.Generator
) -> Tensor:
    """Hutchinson diagonal of ``training_step``'s loss averaged over ``batches``, flat over the federated parameters
    (those that train), in eval mode."""
    trainable: list[Tensor] = [p for _, p in federated_parameters(module)]
    total, count = torch.zeros(sum(p.numel() for p in trainable), device=trainable[0].device), 0
    with _evaluating(module):
        for index, batch in enumerate(batches):
            total += hutchinson_diagonal(training_loss(module, batch, index), trainable, probes, generator)
            count += 1
    if count == 0:
        raise ValueError("no batches to estimate the curvature on")
    return total / count


def loss_difference_curvature(
    module: LightningModule,
    batches: Iterable,
    probes: int,
    generator: torch.Generator,
    step: float,
    workspace: Workspace | None = None,
) -> Tensor:
    """Hutchinson's trace / d from the loss alone: for a Rademacher z over the trainable parameters,
    (L(x + s z) - 2 L(x) + L(x - s z)) / s^2 = z^T H z + O(s^2) (exact for a quadratic), averaged over ``probes`` per
    batch and over ``batches``, divided by d = the trainable parameters (as ``module_hessian_diagonal``'s mean).
    Forward passes only, 1 + 2 x ``probes`` a batch, in eval mode; the parameters are restored bit for bit. A
    one-element tensor. Its two model-sized arrays (the start, a probe) come from ``workspace`` when given."""
    if probes < 1:
        raise ValueError(f"probes must be >= 1, got {probes}")
    trainable = [p for _, p in federated_parameters(module)]
    if torch.finfo(trainable[0].dtype).eps > torch.finfo(torch.float32).eps:
        raise ConfigError(
            f"curvature_estimate 'loss_differences' needs float32 or float64 weights (a {trainable[0].dtype} loss "
            "rounds away the second difference); use curvature_estimate: hutchinson"
        )
    sizes = [p.numel() for p in trainable]
    draws = probe_generator(generator, trainable[0].device)
    workspace = workspace or Workspace()
    flat_start = workspace.get("curvature.start", (sum(sizes),), trainable[0])
    probe = workspace.get("curvature.probe", (sum(sizes),), trainable[0])
    with torch.no_grad(), _evaluating(module):
        start = [part.view_as(p) for part, p in zip(flat_start.split(sizes), trainable, strict=True)]
        for x, p in zip(start, trainable, strict=True):
            x.copy_(p)
        try:
            total, count = _second_differences(module, trainable, start, batches, probes, draws, probe, step)
        finally:
            _restore(trainable, start)
    if count == 0:
        raise ValueError("no batches to estimate the curvature on")
    mean = total / (count * probes * sum(sizes))
    return torch.tensor([mean], dtype=trainable[0].dtype, device=trainable[0].device)


def _second_differences(
    module: LightningModule,
    trainable: Sequence[Tensor],
    start: list[Tensor],
    batches: Iterable,
    probes: int,
    draws: torch.Generator,
    probe: Tensor,
    step: float,
) -> tuple[float, int]:
    """The sum over ``batches`` and ``probes`` Rademacher directions z (drawn into ``probe``) of
    (L(x + s z) - 2 L(x) + L(x - s z)) / s^2 at the parameters' ``start`` x, and the number of batches; the
    parameters are left at a probe's point."""
    sizes = [p.numel() for p in trainable]

    def loss_at(batch: Any, index: int, shifts: list[Tensor], scale: float) -> float:
        """The loss at the start + scale x shifts."""
        for p, x, z in zip(trainable, start, shifts, strict=True):
            torch.add(x, z, alpha=scale, out=p.data)
        return float(training_loss(module, batch, index))

    total, count = 0.0, 0
    for index, batch in enumerate(batches):
        _restore(trainable, start)
        centre = float(training_loss(module, batch, index))
        for _ in range(probes):
            z = torch.randint(0, 2, (sum(sizes),), generator=draws, out=probe).mul_(2).sub_(1)
            shifts = [part.view_as(p) for part, p in zip(z.split(sizes), trainable, strict=True)]
            ahead, behind = loss_at(batch, index, shifts, step), loss_at(batch, index, shifts, -step)
            total += (ahead - 2 * centre + behind) / step**2
        count += 1
    return total, count


def _restore(trainable: Sequence[Tensor], start: list[Tensor]) -> None:
    for p, x in zip(trainable, start, strict=True):
        p.data.copy_(x)


def client_hessian_diagonal(
    context: LocalContext,
    client_id: int,
    batches: int,
    probes: int,
    seed: int,
    examples: int | None = None,
    estimate: CurvatureEstimate = "hutchinson",
) -> Tensor:
    """``module_hessian_diagonal`` (or with ``estimate="loss_differences"`` its mean, ``loss_difference_curvature``)
    of the client's live module on ``batches`` of its own shuffled batches, or with ``examples`` on ``batches`` random
    subsets of that many of its examples.

    Raises:
        ValueError: ``probes`` below 1, or no batch to estimate on.
        ConfigError: With ``estimate="loss_differences"``, weights less precise than float32.
    """
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
    if estimate == "loss_differences":
        return loss_difference_curvature(
            context.module, samples, probes, generator, LOSS_DIFFERENCE_STEP, context.workspace
        )
    return module_hessian_diagonal(context.module, samples, probes, generator)


class SquaredGradients:
    """The diagonal empirical Fisher from the mini-batch gradients of a client's own training steps, no extra pass:
    B x the mean over the steps of g * g (B the batch size). A curvature only where the gradients are a likelihood's
    noise (docs/corrections/fedecado.md, "Curvature"). ``estimate`` raises ValueError before any ``add``."""

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
    before it trains (``client_hessian_diagonal``; its mean alone with ``"loss_differences"``), or the squared
    gradients of its training steps (``SquaredGradients``)."""

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
        """Before the client's first step: the Hutchinson estimate (or its mean), or an empty sum of squared
        gradients."""
        if self.batches > 0 and self.estimate == "squared_gradients":
            self.squares = SquaredGradients(context.data.batch_size)
        elif self.batches > 0:
            self.diagonal = client_hessian_diagonal(
                context, client_id, self.batches, self.probes, self.seed, self.examples, self.estimate
            )

    def observe(self, grad: Tensor) -> None:
        """A step's raw gradient, before anything changes it."""
        if self.squares is not None:
            self.squares.add(grad)

    def result(self) -> Tensor | None:
        """The estimate, or None when the client makes none."""
        return self.diagonal if self.squares is None else self.squares.estimate()
