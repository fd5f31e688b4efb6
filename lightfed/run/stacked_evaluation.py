"""Per-client evaluation of a classifier on batched matmuls: the ``val_loss`` and ``val_acc`` its ``validation_step``
logs, for many clients at once, where one-at-a-time evaluation runs a pass of hooks and metrics per client.

It applies where ``stacked_classifier`` does, to a module that keeps ``ClassificationModule``'s ``validation_step`` and
validation hooks, on an in-memory dataset in 32-bit precision. A client's values are its one-at-a-time evaluation's
up to rounding: the mean cross-entropy of its examples, and the share it classifies right (its ``val_acc``)."""

import itertools
import math

import torch
import torch.nn.functional as F
from lightning import LightningModule
from torch import Tensor

from lightfed.core.federated_weights import federated_parameters
from lightfed.data.tensor_batches import TensorBatches
from lightfed.models.classifier import ClassificationModule
from lightfed.run.client import ClientTrainer
from lightfed.run.stacked_classifier import StackedClassifier, stacked_classifier

MONITORS = ("val_loss", "val_acc")
EXAMPLES = 1 << 16  # examples (with padding) evaluated at once
VALIDATION = ("validation_step", "_evaluate") + tuple(
    f"on_validation_{when}" for when in ("start", "epoch_start", "batch_start", "batch_end", "epoch_end", "end")
)


class StackedEvaluation:
    """``validation_step``'s values of clients at weights of their own or shared, a batched computation for many."""

    def __init__(self, classifier: StackedClassifier, module: LightningModule, tensors: TensorBatches) -> None:
        self.classifier, self.module, self.tensors = classifier, module, tensors
        named = federated_parameters(module)
        offsets = [0, *itertools.accumulate(p.numel() for _, p in named)]
        self.layout = [(f"module.{name}", offsets[i], p.shape) for i, (name, p) in enumerate(named)]

    def values(self, client_ids: list[int], rows: Tensor, monitor: str) -> Tensor | None:
        """``monitor`` (``MONITORS``) of each client, float64, at its row of the flat parameters ``rows``
        (``[clients, d]``, or ``[1, d]``: the same for every client); NaN for a client with nothing to evaluate; None
        where the network's layers are not all in ``rows`` (a frozen one)."""
        sizes = [self.tensors.client_eval_indices.size(c) for c in client_ids]
        losses = torch.zeros(len(client_ids), dtype=torch.float64)
        right = torch.zeros(len(client_ids), dtype=torch.float64)
        self.module.eval()
        with torch.no_grad():
            for chunk in _chunks(sizes, shared=rows.shape[0] == 1):
                ids = [client_ids[k] for k in chunk]
                sums = self._sums(ids, rows if rows.shape[0] == 1 else rows[chunk[0] : chunk[-1] + 1])
                if sums is None:
                    return None
                losses[chunk[0] : chunk[-1] + 1], right[chunk[0] : chunk[-1] + 1] = sums
        counts = torch.tensor(sizes, dtype=torch.float64)
        return (losses if monitor == "val_loss" else right) / counts

    def _sums(self, client_ids: list[int], rows: Tensor) -> tuple[Tensor, Tensor] | None:
        """Each client's summed cross-entropy and number classified right over its evaluated examples."""
        groups = self.tensors.client_eval_indices
        indices = [groups[c] for c in client_ids]
        sizes = torch.tensor([len(i) for i in indices])
        if rows.shape[0] == 1:  # one row for all: their examples one after another
            index = torch.cat(indices).unsqueeze(0)
            owner = torch.repeat_interleave(torch.arange(len(client_ids)), sizes)
        else:  # a row each: their examples side by side, padded with their first one
            width = max(1, int(sizes.max()))
            index = torch.stack(
                [torch.cat([i, i[:1].expand(width - len(i))]) if len(i) else i.new_zeros(width) for i in indices]
            )
            owner = torch.arange(len(client_ids)).unsqueeze(1).expand(-1, width)
            owner = torch.where(torch.arange(width) < sizes.unsqueeze(1), owner, -1)
        x, y = self.tensors.train_examples(index.to(self.tensors.train_y.device))
        params = {name: rows[:, s : s + math.prod(shape)].view(-1, *shape) for name, s, shape in self.layout}
        logits = self.classifier.logits(params, x.to(rows.device), [])
        if logits is None:
            return None
        y = y.to(rows.device).reshape(-1)
        logits = logits.reshape(len(y), -1)
        owner = owner.reshape(-1).to(rows.device)
        kept = owner >= 0
        loss = F.cross_entropy(logits[kept], y[kept], reduction="none").double()
        right = (logits[kept].argmax(1) == y[kept]).double()
        zeros = torch.zeros(len(client_ids), dtype=torch.float64, device=rows.device)
        return zeros.index_add(0, owner[kept], loss).cpu(), zeros.index_add(0, owner[kept], right).cpu()


def stacked_evaluation(client: ClientTrainer) -> StackedEvaluation | None:
    """Per-client evaluation of ``client``'s module on batched matmuls, or None where it does not apply."""
    module, tensors = client.module, client.data.in_memory
    classifier = stacked_classifier(module)
    kept = all(getattr(type(module), name) is getattr(ClassificationModule, name) for name in VALIDATION)
    full = getattr(client.fabric.strategy.precision, "precision", "") == "32-true"
    if classifier is None or tensors is None or not kept or not full:
        return None
    return StackedEvaluation(classifier, module, tensors)


def _chunks(sizes: list[int], shared: bool) -> list[list[int]]:
    """Consecutive positions of ``sizes`` evaluated together: at most ``EXAMPLES`` examples, or rows of the padded width
    when each client has a row of its own (``shared`` False); one client at least."""
    chunks: list[list[int]] = []
    total = width = 0
    for k, size in enumerate(sizes):
        width = max(width, size)
        cost = total + size if shared else (len(chunks[-1]) + 1) * width if chunks else size
        if not chunks or cost > EXAMPLES:
            chunks.append([k])
            total, width = size, size
        else:
            chunks[-1].append(k)
            total += size
    return chunks
