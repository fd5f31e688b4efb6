"""The batches of clients trained together, stacked step by step for the clients whose batches there have one size."""

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from lightning.fabric.utilities.apply_func import apply_to_collection
from lightning.pytorch.utilities.data import extract_batch_size
from torch import Tensor

from lightfed.data.module import Batch
from lightfed.data.tensor_batches import ClientDraw, TensorBatches, gathered
from lightfed.run.client import ClientTrainer
from lightfed.run.client_training import TrainingJob

GATHERED_BYTES = 2**24  # a chunk's examples gathered from the dataset at once (GatheredBatches), at most


class ListedBatches:
    """Each client's batches as its one-at-a-time training draws them, stacked per step; padded to ``width`` at least
    (the batch size: every stack of the clients pads alike)."""

    def __init__(self, batches: list[list[Batch]], width: int = 0) -> None:
        self.batches = batches
        self.sizes = [[examples(batch) for batch in client] for client in batches]  # each client's batch sizes
        self.width = max(width, max((max(s) for s in self.sizes if s), default=0))
        self._counts = _counts(self.sizes)

    def stacked(self, step: int, clients: list[int]) -> Batch:
        """The batches of ``clients`` (of one size) at ``step``, stacked: a row per client."""
        return joined([self.batches[k][step] for k in clients], torch.stack)

    def rows(self, step: int, at: slice, size: int | None) -> tuple[Batch, Tensor]:
        """The batches at ``step`` of the clients ``at`` (one after another), stacked: of ``size`` examples, or
        padded with zeros to the widest batch (``size`` None; ``[clients, width, ...]``); and each one's size."""
        clients = range(at.start, at.stop)
        batches = [self.batches[k][step] if size else _padded(self.batches[k][step], self.width) for k in clients]
        counts = self._counts[step, at]
        return joined(batches, torch.stack), counts.to(_first_leaf(batches[0]).device, non_blocking=True)


class GatheredBatches:
    """Every client's examples in its training order, as indices into an in-memory dataset drawn for all of them at
    once (what ``ListedBatches`` holds, without a draw and a split per client), laid out step by step, each step's
    rows the clients up to the last one still training there (``[rows, batch size]``: the clients sorted longest
    first gather no row they do not train), and gathered from the dataset a block of steps at a time: as many steps as
    ``budget`` bytes hold (at least one), so that a step's batches are views of its block (a gather a step took a
    tenth of a step of a small MLP), and a chunk of large examples holds one step's at a time, not its clients' whole
    training."""

    def __init__(self, tensors: TensorBatches, clients: Sequence[ClientDraw], budget: int = GATHERED_BYTES) -> None:
        """``clients``: each client's id, the seed of its generator and its local work (``TensorBatches.clients_order``)."""
        self.tensors = tensors
        order, self.sizes = tensors.clients_order(clients)
        steps = max(map(len, self.sizes), default=0)
        width = max(tensors.batch_size, max((max(s) for s in self.sizes if s), default=0))  # alike in every stack
        alike = self.sizes[0] if self.sizes else []  # the first client's batch sizes
        if self.sizes and all(s == alike for s in self.sizes) and all(size == width for size in alike[:-1]):
            # alike clients whose batches are all full but the last: each one's order, padded to full batches
            padded = torch.nn.functional.pad(order.view(len(self.sizes), -1), (0, steps * width - sum(alike)))
            examples = padded.view(len(self.sizes), steps, width).transpose(0, 1)  # pads: never read
        else:
            sizes = torch.tensor([s + [0] * (steps - len(s)) for s in self.sizes], dtype=torch.long)
            sizes = sizes.reshape(len(self.sizes), steps)
            starts = (sizes.flatten().cumsum(0) - sizes.flatten()).view_as(sizes)  # where each batch starts in order
            positions = starts.unsqueeze(2) + torch.arange(width)  # [clients, steps, width]: each batch's examples
            positions = positions.transpose(0, 1).clamp(max=max(len(order) - 1, 0))  # past a batch's end: never read
            examples = gathered(order, positions.to(order.device, non_blocking=True)) if len(order) else positions
        extents = [0] * steps  # each step's rows: up to its last client still training
        for k, client_sizes in enumerate(self.sizes):
            extents[: len(client_sizes)] = [k + 1] * len(client_sizes)
        kept = torch.arange(len(self.sizes)) < torch.tensor(extents, dtype=torch.long).unsqueeze(1)
        self._examples = examples[kept.to(examples.device)]  # [rows of every step, width], step after step
        self._offsets = [0, *itertools.accumulate(extents)]  # where each step's rows start
        self.block = max(1, budget // max(len(self.sizes) * width * tensors.example_bytes, 1))  # steps gathered at once
        self._gathered: tuple[int, Batch] | None = None  # the block gathered last: its first step, its examples
        self._counts = _counts(self.sizes).to(self._examples.device, non_blocking=True)

    def stacked(self, step: int, clients: list[int]) -> Batch:
        """The batches of ``clients`` (of one size) at ``step``, stacked: a row per client."""
        examples = self._step_examples(step)
        size, whole = self.sizes[clients[0]][step], len(clients) == len(self.sizes)
        index = None if whole else device_index(clients, self._examples.device)
        return tuple(_rows(at, size, index) for at in examples)  # type: ignore[return-value]

    def rows(self, step: int, at: slice, size: int | None) -> tuple[Batch, Tensor]:
        """The batches at ``step`` of the clients ``at`` (one after another), stacked: their first ``size`` examples,
        or as wide as the widest batch (``size`` None; ``[clients, width, ...]``: views; past a client's size, other
        examples); and each one's size."""
        examples = self._step_examples(step)
        batch = tuple(e[at] if size is None or size == e.shape[1] else e[at, :size].contiguous() for e in examples)
        return batch, self._counts[step, at]  # type: ignore[return-value]

    def _step_examples(self, step: int) -> Batch:
        """The examples at ``step`` of its rows (``[rows, width, ...]`` each), from the block gathered for it."""
        first, offsets = step - step % self.block, self._offsets
        if self._gathered is None or self._gathered[0] != first:
            last = offsets[min(first + self.block, len(offsets) - 1)]
            self._gathered = first, self.tensors.train_examples(self._examples[offsets[first] : last])
        start, end = offsets[step] - offsets[first], offsets[step + 1] - offsets[first]
        return tuple(examples[start:end] for examples in self._gathered[1])  # type: ignore[return-value]


def counts_width(batch: Any) -> int:
    """The width of a padded batch (``[clients, width, ...]``): its first tensor's second dimension."""
    return int(_first_leaf(batch).shape[1])


def _counts(sizes: list[list[int]]) -> Tensor:
    """Each client's batch size at each step (``[steps, clients]``, 0 past its last)."""
    steps = max(map(len, sizes), default=0)
    return torch.tensor([s + [0] * (steps - len(s)) for s in sizes], dtype=torch.long).reshape(len(sizes), steps).T


def _padded(batch: Any, width: int) -> Any:
    """``batch`` with zeros after its examples, ``width`` of them."""
    return apply_to_collection(batch, Tensor, lambda t: torch.cat([t, t.new_zeros(width - len(t), *t.shape[1:])]))


def _first_leaf(batch: Any) -> Any:
    """The first leaf of ``batch`` in tuples, lists or dicts (an empty one's self)."""
    first = batch
    while isinstance(first, (tuple, list, dict)) and first:
        first = next(iter(first.values())) if isinstance(first, dict) else first[0]
    return first


def device_index(values: list[int], device: torch.device) -> Tensor:
    """``values`` as an index tensor on ``device``, copied without waiting for the device's queued work (a blocking
    copy to a GPU would wait for it, at every step)."""
    return torch.tensor(values, dtype=torch.long).to(device, non_blocking=True)


def examples(batch: Any) -> int:
    """The number of examples in ``batch``: its first tensor's length (read cheaply where the batch is tensors in
    tuples, lists or dicts), as Lightning's ``extract_batch_size`` reads it."""
    first = _first_leaf(batch)
    return len(first) if isinstance(first, Tensor) and first.ndim else extract_batch_size(batch)


def joined(batches: list[Any], join: Callable[[list[Tensor]], Tensor]) -> Any:
    """Batches of the same structure joined leaf by leaf with ``join``: ``torch.stack`` (a row per batch, one per
    client) or ``torch.cat`` (their examples one after another)."""
    first = batches[0]
    if isinstance(first, Tensor):
        return join(batches)
    if isinstance(first, dict):
        return {key: joined([b[key] for b in batches], join) for key in first}
    return type(first)(joined([b[i] for b in batches], join) for i in range(len(first)))


def _rows(examples: Tensor, size: int, index: Tensor | None) -> Tensor:
    """The first ``size`` examples of the rows ``index`` (None: all) of a step's ``examples`` ``[clients, width,
    ...]``, contiguous, as a gather of them gives them."""
    if size < examples.shape[1]:
        examples = examples[:, :size]
    return examples.contiguous() if index is None else examples.index_select(0, index)


def chunk_batches(client: ClientTrainer, jobs: list[TrainingJob]) -> ListedBatches | GatheredBatches:
    """The batches of ``client``'s ``jobs``, drawn as their one-at-a-time training draws them (and poisoned as an attack would):
    gathered at once from an in-memory dataset where none is augmented or poisoned."""
    data, attack = client.data, client.attack
    tensors = data.plain_tensors
    if tensors is None or any(attack.is_malicious(job.plan.client_id) for job in jobs):
        return ListedBatches(
            width=data.batch_size,
            batches=[
                list(
                    attack.batches(
                        data.client_batches(
                            job.plan.client_id,
                            torch.Generator().manual_seed(job.plan.seed),
                            job.plan.epochs,
                            job.plan.steps,
                        ),
                        job.plan,
                    )
                )
                for job in jobs
            ],
        )
    return GatheredBatches(
        tensors, [(job.plan.client_id, job.plan.seed, job.plan.epochs, job.plan.steps) for job in jobs]
    )
