"""The check that a module computes a step folded (``folded_step``) as it does under vmap, made once a model."""

from collections.abc import Callable

import torch
from lightning.fabric.utilities.apply_func import apply_to_collection
from torch import Tensor

from lightfed.data.module import Batch
from lightfed.errors import LightfedError
from lightfed.run.folded_step import NotFolded
from lightfed.run.stacked_batches import device_index
from lightfed.run.trainer_view import DiffersByClient

FOLD_TOLERANCE = 1e-4  # the largest relative difference of a folded step from vmap's that folding accepts

Computed = tuple[Tensor, dict[str, Tensor]]  # each client's loss and what the module logged, a value per client


def check_fold(
    folded_loss: Callable[[], Computed],
    vmapped_loss: Callable[[dict[str, Tensor], Batch], Computed],
    leaves: dict[str, Tensor],
    at: slice,
    batch: Batch,
    groups: list[tuple[int, list[int]]],
) -> None:
    """Compares the folded losses and gradients at the stacked ``leaves`` of the clients ``at`` on their padded
    ``batch`` (``folded_loss``) with vmap's of each of their ``groups`` (``vmapped_loss``), relative, within
    ``FOLD_TOLERANCE``; raises ``NotFolded`` where they differ (a step that acts across examples: a batch norm, a mean
    over the batch) or where ``training_step`` fails on folded batches (it reads their size, say)."""
    try:
        loss, logged = folded_loss()
    except (LightfedError, DiffersByClient, NotFolded):
        raise
    except Exception as error:
        reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        raise NotFolded(f"its training_step fails on folded batches ({reason})") from error
    folded = torch.autograd.grad(loss.sum(), list(leaves.values()), allow_unused=True)
    expected = {name: loss.new_zeros(len(loss)) for name in ("loss", *logged)}
    total = loss.new_zeros(())
    for size, group in groups:
        index = device_index(group, loss.device)  # the clients' stacked rows
        within = device_index([k - at.start for k in group], loss.device)  # theirs of ``batch``
        rows = {name: value.index_select(0, index) for name, value in leaves.items()}
        group_batch = apply_to_collection(
            batch, Tensor, lambda t, within=within, size=size: t.index_select(0, within)[:, :size]
        )
        group_loss, group_logged = vmapped_loss(rows, group_batch)
        if set(group_logged) != set(logged):
            raise NotFolded(f"its training_step logged {sorted(logged)} folded, {sorted(group_logged)} under vmap")
        for name, values in {"loss": group_loss.detach(), **group_logged}.items():
            expected[name].index_add_(0, within, values.float())
        total = total + group_loss.sum()
    vmapped = torch.autograd.grad(total, list(leaves.values()), allow_unused=True)
    found = {"loss": loss.detach(), **logged}
    differences = [_relative(found[name], values) for name, values in expected.items()] + [
        _relative(a, b) for a, b in zip(folded, vmapped, strict=True) if a is not None and b is not None
    ]
    if max(differences) > FOLD_TOLERANCE or sum(g is None for g in folded) != sum(g is None for g in vmapped):
        raise NotFolded(f"its training_step computed otherwise on folded batches ({max(differences):.2g})")


def _relative(a: Tensor, b: Tensor) -> float:
    """The largest difference of ``a`` from ``b`` per row (client), relative to the row's norm."""
    a, b = a.reshape(len(a), -1).float(), b.reshape(len(b), -1).float()
    return float(((a - b).norm(dim=1) / b.norm(dim=1).clamp(min=1e-12)).max())
