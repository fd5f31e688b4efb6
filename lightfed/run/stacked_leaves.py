"""Stacked clients' parameters as autograd leaves: each parameter's rows ``[clients, *shape]``, their gradients as
views of the flat gradient rows, and the optimizer step and clipping of every row at once."""

import itertools
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.sgd import sgd as functional_sgd

from lightfed.core.federated_weights import federated_parameters
from lightfed.run.stacked_batches import device_index

Layout = list[tuple[str, int, int, torch.Size]]  # each parameter's name, optimizer group, first column, shape
BufferLayout = list[tuple[str, int, torch.Size]]  # each floating buffer's name, first column, shape


def stacked_layout(module: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[list[Tensor], Layout, BufferLayout]:
    """Where ``module``'s parameters and floating buffers lie in the stacked weights of its clients: the flat columns
    of each of ``optimizer``'s groups, each parameter's place in its group's tensor, each buffer's in the flat
    buffers."""
    named = federated_parameters(module)  # the order of the flat parameters
    groups = optimizer.param_groups
    group_of = {id(p): g for g, group in enumerate(groups) for p in group["params"]}
    offsets = [0, *itertools.accumulate(p.numel() for _, p in named)]
    columns = [  # the flat columns of each optimizer group's parameters, in flat order
        torch.cat([torch.arange(offsets[i], offsets[i + 1]) for i, (_, p) in enumerate(named) if group_of[id(p)] == g])
        for g in range(len(groups))
    ]
    starts = {g: 0 for g in range(len(groups))}
    layout: Layout = []  # each parameter's name, optimizer group, first column in its group's tensor, and shape
    for name, p in named:
        g = group_of[id(p)]
        layout.append((f"module.{name}", g, starts[g], p.shape))
        starts[g] += p.numel()
    floating = [(name, b) for name, b in module.named_buffers() if b.is_floating_point()]  # flat order
    offsets = [0, *itertools.accumulate(b.numel() for _, b in floating)]
    buffer_layout: BufferLayout = [(f"module.{name}", offsets[i], b.shape) for i, (name, b) in enumerate(floating)]
    return columns, layout, buffer_layout


@dataclass
class StackedLeaves:
    """Each parameter's stacked rows ``[clients, *shape]`` by name (``params``), as autograd leaves that share memory
    with the stacked weights and that the optimizer steps, the same rows outside autograd (``rows``, in that order),
    and the views of the weights' flat gradients (``grads``), where a local rule, clipping or DP-SGD reads and writes a
    client's gradient as one row. A step of the first clients only back-propagates into leaves of their rows
    (``prefix``), not into slices of the whole, whose backward pass fills every row."""

    params: dict[str, Tensor]
    rows: list[Tensor]
    grads: dict[str, Tensor]
    zero_from: int | None = None  # the flat gradients' rows from here on are zero (None: not known)
    taken: tuple[int, list[Tensor]] | None = None  # the first clients' gradients of the step, where only theirs

    @classmethod
    def of(cls, weights: list[Tensor], layout: Layout) -> "StackedLeaves":
        """Each parameter's stacked rows as leaves that share memory with ``weights`` (which the optimizer steps), and
        the views of the ``weights``' gradients (set here) they go to: a gradient per parameter, instead of one of the
        whole flat row per parameter (a quarter of a step of a small MLP)."""
        for weight in weights:
            weight.grad = torch.empty_like(weight)  # written before it is read: ``collect`` and ``step``
        params, rows, grads = {}, [], {}
        for name, g, start, shape in layout:
            columns = slice(start, start + math.prod(shape))
            rows.append(weights[g][:, columns].view(-1, *shape))
            params[name] = rows[-1].detach().requires_grad_()
            grads[name] = weights[g].grad[:, columns].view(-1, *shape)  # type: ignore[index]
        return cls(params, rows, grads)

    def prefix(self, active: int) -> dict[str, Tensor]:
        """Leaves of the first ``active`` rows of each parameter (views of them)."""
        return {name: leaf[:active].detach().requires_grad_() for name, leaf in self.params.items()}

    def absorb(self, prefix: dict[str, Tensor], active: int) -> None:
        """Takes the gradients of the leaves ``prefix`` (``prefix(active)``) as the step's: each row below them 0."""
        self.taken = (
            active,
            [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in prefix.values()],
        )

    def collect(self) -> None:
        """Moves the gradients of the backward pass just taken into the flat gradients (zero where a leaf got none):
        autograd writes each afresh in its leaf's layout, and adding into a strided view instead is no faster."""
        if self.taken is not None:
            active, taken = self.taken
            for grad, part in zip(self.grads.values(), taken, strict=True):
                grad[:active].copy_(part)
                if self.zero_from is None or self.zero_from > active:
                    grad[active : self.zero_from].zero_()
            self.zero_from, self.taken = active, None
            return
        for name, leaf in self.params.items():
            if leaf.grad is None:
                self.grads[name].zero_()
            else:
                self.grads[name].copy_(leaf.grad)
                leaf.grad = None
        self.zero_from = None

    def step(
        self, optimizer: torch.optim.Optimizer, flat: bool, sgd: dict[str, Any] | None, lrs: Tensor | None = None
    ) -> None:
        """Steps the leaves with their gradients: the flat gradients where ``flat`` (collected, then read or written
        there), else the backward pass's own (zero where a leaf got none, as in the flat gradient one client at a time
        steps: a copy fewer a step); ``sgd``: the optimizer's settings where it is plain SGD (``plain_sgd``), which
        steps only the first clients' rows where only theirs have gradients, each row at its own step size where
        ``lrs`` has one a row."""
        if self.taken is not None:
            if sgd is not None:
                active, taken = self.taken
                sgd_step([row[:active] for row in self.rows], taken, sgd, None if lrs is None else lrs[:active])
                self.taken = None
                return
            self.collect()
            flat = True
        for name, leaf in self.params.items():
            if flat:
                leaf.grad = self.grads[name]
            elif leaf.grad is None:
                leaf.grad = self.grads[name].zero_()
        if sgd is None:
            optimizer.step()
        else:
            sgd_step(self.rows, [leaf.grad for leaf in self.params.values()], sgd, lrs)  # type: ignore[misc]
        for leaf in self.params.values():
            leaf.grad = None


def sgd_step(rows: list[Tensor], grads: list[Tensor], sgd: dict[str, Any], lrs: Tensor | None) -> None:
    """Plain SGD's step of ``rows`` (``sgd``: its settings, ``plain_sgd``): torch's functional step at one step size,
    or with ``lrs`` each client's row at its own (``lrs[k]``), as torch's step of one client computes it: the
    gradient negated where it maximizes, plus the weight decay, times minus the step size."""
    if lrs is None:
        functional_sgd(rows, grads, [None] * len(rows), **sgd)  # type: ignore[arg-type]
        return
    for row, grad in zip(rows, grads, strict=True):
        step = grad.neg() if sgd["maximize"] else grad
        if sgd["weight_decay"] != 0:
            step = step.add(row, alpha=sgd["weight_decay"])
        row.addcmul_(step, lrs.view(-1, *[1] * (row.dim() - 1)), value=-1)


def plain_sgd(optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
    """The arguments of torch's functional ``sgd`` (but the tensors) with which ``optimizer``'s step calls it, where
    it is an SGD of one group without momentum and with a float step size (None otherwise): ``SGD.step`` spends as long
    again on its bookkeeping (a tenth of a step of 50 clients of a small MLP), and calling ``sgd`` directly steps the
    same."""
    if type(optimizer) is not torch.optim.SGD or len(optimizer.param_groups) != 1:
        return None
    group = optimizer.param_groups[0]
    if group["momentum"] != 0 or group["differentiable"] or not isinstance(group["lr"], float):
        return None
    names = ("weight_decay", "momentum", "lr", "dampening", "nesterov", "maximize", "foreach", "fused")
    return {name: group[name] for name in names}


def clip_rows(grads: list[Tensor], value: float, algorithm: str) -> None:
    """Each client's gradient (its row of ``grads``, one per optimizer group) clipped as ``gradient_clip_val`` and
    ``gradient_clip_algorithm`` clip one client's."""
    if algorithm != "norm":
        for grad in grads:
            grad.clamp_(-value, value)
        return
    norms = torch.stack([grad.norm(dim=1) for grad in grads], dim=1).norm(dim=1)
    scale = (value / (norms + 1e-6)).clamp(max=1.0)
    for grad in grads:
        grad.mul_(scale.unsqueeze(1))


def stacked_rows(tensors: list[Tensor], device: torch.device) -> Tensor:
    """``tensors`` as the rows of one tensor on ``device``: a broadcast view where they are one tensor (the global
    weights every client of a round starts from)."""
    if all(tensor is tensors[0] for tensor in tensors):
        return tensors[0].to(device).expand(len(tensors), -1)
    return torch.stack([tensor.to(device) for tensor in tensors])


def take_rows(
    final: Tensor, final_buffers: Tensor, weights: list[Tensor], buffers: Tensor, rows: list[int], columns: list[Tensor]
) -> None:
    """Copies the flat parameters and buffers of the clients ``rows`` (that have taken their last step) into their
    rows of ``final`` and ``final_buffers`` (``columns``: each optimizer group's flat columns)."""
    if len(rows) == len(final) and len(weights) == 1:  # every client at once
        final.copy_(weights[0])
        final_buffers.copy_(buffers)
        return
    if len(weights) == 1 and rows == list(range(rows[0], rows[0] + len(rows))):  # one after another: views
        at = slice(rows[0], rows[0] + len(rows))
        final[at].copy_(weights[0][at])
        final_buffers[at].copy_(buffers[at])
        return
    index = device_index(rows, final.device)
    final_buffers.index_copy_(0, index, buffers.index_select(0, index))
    with torch.no_grad():
        for group_columns, weight in zip(columns, weights, strict=True):
            if len(weights) == 1:
                final.index_copy_(0, index, weight.index_select(0, index))
            else:
                final[index.unsqueeze(1), group_columns.to(final.device)] = weight.index_select(0, index)
