"""The loss of a step of a chunk's stacked clients, back-propagated into their rows: in one padded call where the
clients still training are the first ones (on batched matmuls: ``stacked_classifier``, or folded: ``folded_step``),
else a call per batch size under ``torch.vmap``; every example's loss under DP-SGD. What the module logs is kept per
client (``LoggedRows``) and ``self.trainer`` shows the step of the clients computed (``_together``)."""

import math
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, NamedTuple

import torch
from lightning import LightningModule
from lightning.fabric.utilities.apply_func import apply_to_collection
from torch import Tensor, nn

from lightfed.adapters import ParameterSlots, logging_to
from lightfed.core.training_loss import training_loss
from lightfed.data.module import Batch
from lightfed.errors import ConfigError
from lightfed.run.client import ClientTrainer, plain_precision
from lightfed.run.fold_check import check_fold
from lightfed.run.folded_step import FoldedStep, NotFolded, folded, may_fold
from lightfed.run.logged_rows import LoggedRows
from lightfed.run.stacked_batches import GatheredBatches, ListedBatches, counts_width, device_index, joined
from lightfed.run.stacked_classifier import stacked_classifier
from lightfed.run.stacked_leaves import BufferLayout, Layout, StackedLeaves
from lightfed.run.stacked_schedule import Calls, Groups, row_calls
from lightfed.run.vectorized_privacy import PrivateClients


class GroupBatch(NamedTuple):
    """The batches of a group of clients at a step, stacked; the examples in each; the clients' generators (their
    dropout masks, where the model draws them)."""

    batch: Batch
    size: int
    generators: list[torch.Generator]


class TrainingStep(nn.Module):
    """``module.training_step`` as a module's forward, for ``torch.func.functional_call``."""

    def __init__(self, module: LightningModule) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Batch, batch_idx: int) -> Tensor:
        return training_loss(self.module, batch, batch_idx)


class StackedLoss:
    """The losses of a step of stacked clients of ``client``'s module (parameters ``layout``, floating buffers
    ``buffer_layout``), back-propagated into their rows. ``composed``: a client's rows must be computed alike in any
    stack (``VectorizedClients``), so a step whose clients still training are not the first ones is refused."""

    def __init__(self, client: ClientTrainer, layout: Layout, buffer_layout: BufferLayout, composed: bool) -> None:
        self.client, self.layout, self.buffer_layout, self.composed = client, layout, buffer_layout, composed
        self.step = TrainingStep(client.module)
        self.slots = ParameterSlots(self.step, [name for name, *_ in layout])  # a folded step's parameters
        self.logged_sizes: dict[str, int | None] = {}  # the batch_size each name was logged with
        self.logged_rows = LoggedRows()  # what a chunk's steps logged, until its clients are done
        self.per_epoch: list[int] = []  # the batches of an epoch of each client trained together
        self.vmapped = torch.vmap(self.client_loss, in_dims=(0, 0, None), randomness="error")
        self.per_example = torch.vmap(self.example_loss, in_dims=(0, 0, None), randomness="error")
        self.stacked = stacked_classifier(client.module)  # batched matmuls instead of vmap, where the model allows
        # the clients still training at a step computed in one call, their batches padded (``rows_loss``): on
        # batched matmuls, or folded (``folded_step``, checked against vmap once: ``check_fold``); none with
        # running statistics
        self.prefix = self.stacked is not None or may_fold(client.module)
        self.fold_checked = self.stacked is not None
        self.draws = self.prefix if self.stacked is None else self.stacked.draws
        self.autocast = nullcontext if plain_precision(client.fabric) else client.fabric.autocast

    def buffer_rows(self, rows: Tensor) -> dict[str, Tensor]:
        """Each floating buffer's rows of the flat buffer ``rows``, by name: copies, since under vmap an in-place
        update of a strided view is lost."""
        return {
            name: rows[:, start : start + math.prod(shape)].reshape(-1, *shape).clone()
            for name, start, shape in self.buffer_layout
        }

    def backward(
        self,
        groups: Groups,
        step: int,
        leaves: StackedLeaves,
        buffers: Tensor,
        batches: ListedBatches | GatheredBatches,
        generators: list[torch.Generator],
        losses: Tensor,
    ) -> None:
        """Back-propagates the summed losses at ``step`` of the ``groups`` of clients (``groups_at``: each batch size
        with its clients) into the leaves' gradients; ``generators``: each client's (dropout), or none. Where the
        clients are the first ones, in one call on their batches padded (``rows_loss``); else, where each group's
        clients are one after another, a call per group on views."""
        with self.autocast():  # the model's precision (bf16-mixed: autocast)
            if self.prefix and groups:
                calls = row_calls(groups)
                if self.composed and (calls is None or len(calls) > 1):
                    raise NotFolded("its clients still training are not the first ones")  # not under vmap: see composed
                stack = len(buffers)
                active = calls[0][0].stop if calls is not None and len(calls) == 1 else stack
                params = leaves.params if active == stack else leaves.prefix(active)
                with self.slots.holding(list(params.values())) if self.stacked is None else nullcontext():
                    loss = None if calls is None else self.calls_loss(calls, step, params, batches, generators, losses)
                if loss is not None:
                    loss.backward()
                    if active < stack:
                        leaves.absorb(params, active)
                    return
            total: Tensor | None = None
            for size, group in groups:
                stacked = GroupBatch(
                    batches.stacked(step, group), size, [generators[k] for k in group] if generators else []
                )
                loss = self.groups_loss(group, leaves.params, buffers, stacked, step, losses)
                total = loss if total is None else total + loss
            if total is not None:
                total.backward()  # each client's loss reaches only its own row

    def groups_loss(
        self,
        group: list[int],
        leaves: dict[str, Tensor],
        buffers: Tensor,
        stacked: GroupBatch,
        step: int,
        losses: Tensor,
    ) -> Tensor:
        """The sum of the losses of ``group``'s clients on their ``stacked`` batches at ``step``: a function of their
        rows of the stacked parameters ``leaves`` and of ``buffers`` (running statistics, updated in place); adds each
        to its client's entry of ``losses`` and logs what the module logs, as its clients one at a time would
        (batch-size weighted)."""
        batch, size, generators = stacked
        self.show(group, step)
        whole = len(group) == buffers.shape[0]
        index = None if whole else device_index(group, buffers.device)
        statistics_rows = buffers if index is None else buffers.index_select(0, index)
        params = dict(leaves) if index is None else {name: leaf.index_select(0, index) for name, leaf in leaves.items()}
        params.update(self.buffer_rows(statistics_rows))
        batched = None if self.stacked is None else self.stacked.loss(params, batch, generators)
        loss, logged, updated = (*batched, []) if batched else self.vmapped(params, batch, step)
        if updated:
            updated_rows = torch.cat(updated, dim=1)
            if index is None:
                buffers.copy_(updated_rows)
            else:
                buffers.index_copy_(0, index, updated_rows)
        if index is None:
            losses.add_(loss.detach())
        else:
            losses.index_add_(0, index, loss.detach())
        for name, values in logged.items():
            self.logged_rows.add(name, values, self.logged_sizes.get(name) or size)
        return loss.sum()

    def calls_loss(
        self,
        calls: Calls,
        step: int,
        leaves: dict[str, Tensor],
        batches: ListedBatches | GatheredBatches,
        generators: list[torch.Generator],
        losses: Tensor,
    ) -> Tensor | None:
        """The summed losses at ``step`` of the ``calls``' clients (``row_calls``), a call each (``rows_loss``), added
        to their entries of ``losses`` with what the module logs (weighted by each client's examples) once every call
        is done; None where the module does not compute folded, which one line says (its first folded step is
        compared with vmap's: ``check_fold``)."""
        try:
            computed = [
                self.rows_loss(at, size, step, leaves, batches, generators, groups) for at, size, groups in calls
            ]
        except NotFolded as error:
            if self.composed:  # under vmap, a client's rows would be computed with its group's
                raise
            self.prefix = False
            self.client.fabric.print(
                f"trainer.clients_in_parallel trains {type(self.client.module).__name__}'s clients under vmap: {error}"
            )
            return None
        total: Tensor | None = None
        for (at, _, _), (loss, logged, sizes) in zip(calls, computed, strict=True):
            losses[at].add_(loss.detach())
            for name, values in logged.items():
                self.logged_rows.add(name, values, self.logged_sizes.get(name) or sizes)
            total = loss.sum() if total is None else total + loss.sum()
        return total

    def rows_loss(
        self,
        at: slice,
        size: int | None,
        step: int,
        leaves: dict[str, Tensor],
        batches: ListedBatches | GatheredBatches,
        generators: list[torch.Generator],
        groups: Groups,
    ) -> tuple[Tensor, dict[str, Tensor], list[int]]:
        """The losses at ``step`` of the clients ``at`` (one after another) in one call: on their batches of ``size``,
        or padded to the widest (``size`` None; each client's loss over its own examples); what the module logged and
        the clients' batch sizes; ``groups``: theirs, by batch size, for ``check_fold``."""
        self.show(list(range(at.start, at.stop)), step)
        batch, counts = batches.rows(step, at, size)
        sizes = [batches.sizes[k][step] for k in range(at.start, at.stop)]
        mine = generators[at]
        if self.stacked is not None:
            stacked = next(iter(leaves.values())).shape[0]
            whole = at.start == 0 and at.stop == stacked
            params = leaves if whole else {name: leaf[at] for name, leaf in leaves.items()}
            loss, logged = self.stacked.padded_loss(params, batch, mine, counts, sizes)
            return loss, logged, sizes
        if not self.fold_checked:  # once, in eval mode (``probing``), in float32: what it checks is the structure
            self.fold_checked = True
            with self.probing(), torch.autocast(self.client.fabric.device.type, enabled=False):
                check_fold(
                    lambda: self.folded_loss(leaves, at, batch, counts, [], step, sizes),
                    lambda rows, group_batch: self.vmapped(rows, group_batch, step)[:2],
                    leaves,
                    at,
                    batch,
                    groups,
                )
        loss, logged = self.folded_loss(leaves, at, batch, counts, mine, step, sizes)
        return loss, logged, sizes

    def folded_loss(
        self,
        leaves: dict[str, Tensor],
        at: slice,
        batch: Batch,
        counts: Tensor,
        generators: list[torch.Generator],
        step: int,
        sizes: list[int],
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Each client's loss of its padded batch (``[clients, width, ...]``, its ``sizes`` its own) at its rows ``at`` of the stacked
        ``leaves`` (the module's parameters while the clients train: ``ParameterSlots``),
        ``training_step`` run once on the batches folded (``folded_step``), and what it logged, a value per client."""
        clients, width = len(counts), counts_width(batch)
        logged: dict[str, Tensor] = {}

        def log(name: str, value: Any, *args: Any, batch_size: int | None = None, **kwargs: Any) -> None:
            if not isinstance(value, Tensor) or value.numel() not in (1, clients):
                raise NotFolded(f"training_step logs {name}, not a value per client")
            logged[name] = value.detach().reshape(-1).expand(clients)
            self.logged_sizes[name] = None if batch_size == clients * width else batch_size

        def log_dict(values: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            for name, value in values.items():
                log(name, value, *args, **kwargs)

        rows = {id(value) for value in leaves.values()}
        with (
            logging_to(self.client.module, log, log_dict),
            FoldedStep(rows, at, counts, sizes, width, generators),
        ):
            loss = self.step(folded(batch), step)
        if loss.shape != (clients,):
            raise NotFolded(f"training_step returns a loss of shape {list(loss.shape)}, not one per client")
        return loss, logged

    @contextmanager
    def probing(self) -> Iterator[None]:
        """The module in eval mode (no dropout, which vmap refuses: no draw from the clients' generators), and the
        batch sizes it logs with kept as they were."""
        saved = dict(self.logged_sizes)
        self.client.module.eval()
        try:
            yield
        finally:
            self.client.module.train()
            self.logged_sizes = saved

    def show(self, clients: list[int], step: int) -> None:
        """``self.trainer`` of the ``clients`` (by position) computed together at ``step``: their step and epochs."""
        per_epoch = self.per_epoch
        self.client.view._together(step, lambda: {step // per_epoch[k] for k in clients})

    def private_gradients(
        self,
        private: PrivateClients,
        weights: Tensor,
        buffers: Tensor,
        active: list[int],
        batch: list[tuple[Batch, int]],
        step: int,
        losses: Tensor,
    ) -> None:
        """Sets ``weights.grad`` to the ``active`` clients' private gradients of their Poisson batches ``batch``
        (each with its size) at ``step``: every example's gradient at once (a row of the weights per example,
        back-propagated once), then ``PrivateClients.gradients``; adds each client's mean loss over its batch to its
        entry of ``losses`` (0 for an empty batch) and logs what the module logs per example, weighted by the
        examples."""
        sizes = [size for _, size in batch]
        owner = device_index([k for k, size in zip(active, sizes, strict=True) for _ in range(size)], weights.device)
        per_example = weights.new_zeros(0, weights.shape[1])
        if owner.numel():
            self.show(active, step)
            rows = weights.index_select(0, owner).requires_grad_()
            params = {name: rows[:, s : s + math.prod(shape)].reshape(-1, *shape) for name, _, s, shape in self.layout}
            statistics_rows = buffers.index_select(0, owner)
            params.update(self.buffer_rows(statistics_rows))
            examples = joined([b for b, size in batch if size], torch.cat)
            loss, logged, _ = self.per_example(params, examples, step)
            (per_example,) = torch.autograd.grad(loss.sum(), rows)
            for k, size, client_losses in zip(active, sizes, loss.detach().split(sizes), strict=True):
                if size:  # in a fixed order, as in ``PrivateClients.gradients``
                    losses[k] += client_losses.sum() / size
            for name, values in logged.items():
                self.logged_rows.add(name, values, 1)
        weights.grad.copy_(private.gradients(per_example, sizes, active))  # type: ignore[union-attr]

    def example_loss(
        self, params: dict[str, Tensor], example: Any, step: int
    ) -> tuple[Tensor, dict[str, Tensor], list[Tensor]]:
        """``client_loss`` of one example, as a batch of one (vmapped over the examples of every client)."""
        return self.client_loss(params, apply_to_collection(example, Tensor, lambda t: t.unsqueeze(0)), step)

    def client_loss(
        self, params: dict[str, Tensor], batch: Batch, step: int
    ) -> tuple[Tensor, dict[str, Tensor], list[Tensor]]:
        """One client's loss of ``batch`` at ``params`` (vmapped over clients), with what the module logged and its
        floating buffers after the step (the running statistics it updated)."""
        logged: dict[str, Tensor] = {}

        def log(name: str, value: Any, *args: Any, batch_size: int | None = None, **kwargs: Any) -> None:
            if not isinstance(value, Tensor) or value.numel() != 1:
                what = f"a tensor of shape {list(value.shape)}" if isinstance(value, Tensor) else type(value).__name__
                raise ConfigError(
                    f"trainer.clients_in_parallel vectorized logs one-number tensors from training_step, not {name}: "
                    f"{what}"
                )
            logged[name], self.logged_sizes[name] = value.detach(), batch_size

        def log_dict(values: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            for name, value in values.items():
                log(name, value, *args, **kwargs)

        with logging_to(self.client.module, log, log_dict):
            loss = torch.func.functional_call(self.step, params, (batch, step))
        return loss, logged, [params[name].detach().reshape(-1) for name, _, _ in self.buffer_layout]
