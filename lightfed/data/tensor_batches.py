"""Batches gathered by index from a dataset held in memory as tensors (no DataLoader)."""

import math
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from lightfed.data.client_groups import ClientGroups
from lightfed.data.datasets import TensorSplits

GATHERED_BATCHES = 64  # a client's batches gathered from the dataset at once (its data order is unchanged)

Batch = tuple[Tensor, Tensor]
ClientDraw = tuple[int, int, int | None, int | None]  # a client's id, the seed of its generator, epochs and steps


class TensorBatches:
    """One federation's batches from in-memory tensors, kept on ``device`` when ``on_device`` (else on the CPU).

    ``client_indices`` (what each client trains on), ``val_indices`` (the validation split) and
    ``client_eval_indices`` (what per-client evaluation reads) index the training examples.
    """

    def __init__(
        self,
        splits: TensorSplits,
        client_indices: Sequence[np.ndarray],
        val_indices: np.ndarray,
        client_eval_indices: Sequence[np.ndarray],
        batch_size: int,
        eval_batch_size: int,
        device: torch.device,
        on_device: bool,
    ) -> None:
        storage = device if on_device else torch.device("cpu")
        self.device = device
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.train_x, self.train_y = splits.train_x.to(storage), splits.train_y.to(storage)
        self.test_x, self.test_y = splits.test_x.to(storage), splits.test_y.to(storage)
        self.client_indices = ClientGroups.of(client_indices).to_tensor(storage)
        self.val_indices = torch.as_tensor(np.asarray(val_indices), dtype=torch.long, device=storage)
        self.client_eval_indices = (
            self.client_indices
            if client_eval_indices is client_indices
            else ClientGroups.of(client_eval_indices).to_tensor(storage)
        )

    def client_batches(
        self, client_id: int, generator: torch.Generator, epochs: int | None = None, steps: int | None = None
    ) -> Iterator[Batch]:
        """Shuffled batches of one client's data: ``epochs`` passes, or exactly ``steps`` batches."""
        gathered = GATHERED_BATCHES * self.batch_size
        for order in self._pass_orders(client_id, generator, epochs, steps):
            for first in range(0, len(order), gathered):  # one gather for many batches, each batch a view of it
                x, y = self._batch(self.train_x, self.train_y, order[first : first + gathered])
                yield from zip(x.split(self.batch_size), y.split(self.batch_size), strict=True)

    def clients_order(self, clients: Sequence[ClientDraw]) -> tuple[Tensor, list[list[int]]]:
        """The training examples ``client_batches`` gives several clients (each with the seed of its generator and its
        local work), as indices in their order, client after client, and each client's batch sizes: every pass's
        permutation drawn at once, as ``client_batches`` draws them where nothing else draws from the generator
        between passes (no augmentation), from one generator seeded for each client in turn, and the indices gathered
        from the index once (a gather per client took a tenth of a vectorized round of tiny clients)."""
        groups, batch, generator = self.client_indices, self.batch_size, torch.Generator()
        ids = np.fromiter((client[0] for client in clients), np.int64, len(clients))
        firsts, ends = groups.offsets[ids].tolist(), groups.offsets[ids + 1].tolist()
        work: dict[tuple[int, int | None, int | None], tuple[list[int], list[int]]] = {}  # alike clients' work
        positions, starts, counts, sizes = [], [], [], []
        for (_, seed, epochs, steps), start, end in zip(clients, firsts, ends, strict=True):
            size = end - start
            if (size, epochs, steps) not in work:  # each pass's examples, and the batch sizes
                kept = [min(count, size) for count in self._passes(size, epochs, steps)]
                batches = [[batch] * (count // batch) + [count % batch] * (count % batch > 0) for count in kept]
                work[size, epochs, steps] = kept, [b for pass_batches in batches for b in pass_batches]
            kept, client_sizes = work[size, epochs, steps]
            generator.manual_seed(seed)
            for count in kept:
                drawn = torch.randperm(size, generator=generator)
                positions.append(drawn if count == size else drawn[:count])
            starts += [start] * len(kept)
            counts += kept
            sizes.append(list(client_sizes))
        if not positions:
            return groups.flat[:0], sizes
        offsets = torch.from_numpy(np.repeat(np.array(starts, dtype=np.int64), counts))  # a fifth of torch's time
        return groups.flat.index_select(0, (torch.cat(positions) + offsets).to(groups.flat.device)), sizes

    @property
    def example_bytes(self) -> int:
        """The bytes of one training example: its input and its target."""
        return sum(math.prod(t.shape[1:]) * t.element_size() for t in (self.train_x, self.train_y))

    def train_examples(self, indices: Tensor) -> Batch:
        """The training examples at ``indices``, on the device."""
        return self._batch(self.train_x, self.train_y, indices)

    def _pass_orders(
        self, client_id: int, generator: torch.Generator, epochs: int | None, steps: int | None
    ) -> Iterator[Tensor]:
        """Each pass's shuffled indices of one client's examples, drawn when the pass starts: ``epochs`` whole passes,
        or the first ``steps`` batches' worth."""
        indices = self.client_indices[client_id]
        for count in self._passes(len(indices), epochs, steps):
            order = indices.index_select(0, torch.randperm(len(indices), generator=generator).to(indices.device))
            yield order if count >= len(order) else order[:count]

    def _passes(self, size: int, epochs: int | None, steps: int | None) -> list[int]:
        """How many of each pass's shuffled examples of a client's ``size`` a client trains on (at most): ``epochs``
        whole passes, or the first ``steps`` batches' worth."""
        per_pass = math.ceil(size / self.batch_size)
        passes = epochs if steps is None else math.ceil(steps / per_pass)
        assert passes is not None, "a client trains for epochs or for steps"
        total = passes * per_pass if steps is None else steps
        return [min(per_pass, total - p * per_pass) * self.batch_size for p in range(passes)]

    def client_subset(self, client_id: int, positions: Tensor) -> Batch:
        """The examples at ``positions`` (0 .. client_size - 1) of one client's data."""
        indices = self.client_indices[client_id]
        return self._batch(self.train_x, self.train_y, indices[positions.to(indices.device)])

    def test_batches(self, rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
        """Batches of this process's contiguous share of the central test set."""
        for chunk in self._shares(len(self.test_y), rank, world_size):
            yield self._batch(self.test_x, self.test_y, chunk)

    def val_batches(self, rank: int = 0, world_size: int = 1) -> Iterator[Batch]:
        """Batches of this process's contiguous share of the validation split."""
        for chunk in self._shares(len(self.val_indices), rank, world_size):
            yield self._batch(self.train_x, self.train_y, self.val_indices[chunk])

    def client_eval_batches(self, client_id: int) -> Iterator[Batch]:
        """Batches of the examples per-client evaluation reads for one client, in order."""
        indices = self.client_eval_indices[client_id]
        for chunk in self._shares(len(indices), 0, 1):
            yield self._batch(self.train_x, self.train_y, indices[chunk])

    def _shares(self, count: int, rank: int, world_size: int) -> Iterator[slice]:
        """Slices of at most ``eval_batch_size`` covering process ``rank``'s contiguous share of ``count`` items."""
        bounds = np.linspace(0, count, world_size + 1).astype(int)
        for start in range(bounds[rank], bounds[rank + 1], self.eval_batch_size):
            yield slice(start, min(start + self.eval_batch_size, bounds[rank + 1]))

    def _batch(self, x: Tensor, y: Tensor, index: Tensor | slice) -> Batch:
        """The examples at ``index`` (a slice, or indices of any shape) on the device."""
        if isinstance(index, Tensor):
            x, y = gathered(x, index), gathered(y, index)
        else:
            x, y = x[index], y[index]
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)


def gathered(examples: Tensor, index: Tensor) -> Tensor:
    """``examples[index]`` (``index`` of any shape) with ``index_select``: a quarter of indexing's time on a CPU."""
    if index.dim() == 1:
        return examples.index_select(0, index)
    return examples.index_select(0, index.flatten()).view(*index.shape, *examples.shape[1:])
