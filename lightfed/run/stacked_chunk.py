"""A chunk of stacked clients while they train together, and their updates once they are done."""

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lightfed.core.local_rule import LocalRule
from lightfed.core.messages import ClientRows
from lightfed.run.client_training import TrainingJob
from lightfed.run.stacked_batches import GatheredBatches, ListedBatches
from lightfed.run.stacked_leaves import StackedLeaves
from lightfed.run.stacked_schedule import Groups, summed
from lightfed.run.vectorized_privacy import PrivateClients


@dataclass
class StackedChunk:
    """A chunk's clients while they train together: their jobs, start rows, running statistics (``buffers``) and
    weights (one tensor per optimizer group) with its leaves and optimizer (``sgd``: plain SGD's settings, or None),
    each one's step size (``lrs``; ``lr_rows``: one a row where they differ, which only plain SGD takes), local rules
    and batches (``private``: DP-SGD's Poisson batches), each one's steps, each step's groups of clients and the
    clients that end there (``ends``), the final rows (the weights where every client ends at once), summed losses
    and rules' reports."""

    jobs: list[TrainingJob]
    starts: Tensor
    buffers: Tensor
    weights: list[Tensor]
    lrs: list[float]
    lr_rows: Tensor | None
    leaves: StackedLeaves
    optimizer: torch.optim.Optimizer
    sgd: dict[str, Any] | None
    rules: dict[int, LocalRule]
    private: PrivateClients | None
    batches: ListedBatches | GatheredBatches
    steps: list[int]
    schedule: list[Groups]
    generators: list[torch.Generator]
    ends: dict[int, list[int]]
    at_once: bool
    final: Tensor
    final_buffers: Tensor
    losses: Tensor
    num_examples: list[int]
    flat: bool  # the step's gradients are read and written as rows of the flat ones
    clip: bool
    reports: dict[int, dict[str, Any]]

    def rows(self) -> ClientRows:
        """The clients' updates, once each has taken its last step."""
        local_times = [summed(lr, n) for lr, n in zip(self.lrs, self.steps, strict=True)]
        return ClientRows(
            client_ids=[job.plan.client_id for job in self.jobs],
            deltas=self.final.sub_(self.starts),
            buffers=self.final_buffers,
            num_examples=self.num_examples,
            num_steps=self.steps,
            local_times=local_times,
            train_losses=self.losses / torch.tensor(self.steps, device=self.losses.device).clamp(min=1),
            reports=[self.reports.get(k, {}) for k in range(len(self.steps))],
        )
