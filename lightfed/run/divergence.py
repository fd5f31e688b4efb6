"""Why the global weights became NaN or Inf: the clients' data, or else the step sizes."""

from collections.abc import Iterable
from typing import Any

import torch

from lightfed.data.module import FederatedDataModule
from lightfed.errors import DivergenceError


def divergence_error(round: int, data: FederatedDataModule, client_ids: Iterable[int]) -> DivergenceError:
    """The error for weights that became NaN/Inf in round ``round`` (counted from 1): it names the first of the
    round's clients whose training examples hold NaN or Inf (one pass over their data, on this failure only), else
    it blames the learning rate."""
    for client_id in client_ids:
        batches = data.client_batches(client_id, torch.Generator().manual_seed(0), epochs=1)
        if not all(_finite(batch) for batch in batches):
            return DivergenceError(
                f"the global weights became NaN/Inf in round {round}: client {client_id}'s training examples hold "
                "NaN or Inf; clean the data (or drop those examples)"
            )
    return DivergenceError(
        f"the global weights became NaN/Inf in round {round}; lower the learning rate (model lr or strategy.server_lr)"
    )


def _finite(batch: Any) -> bool:
    """Whether every floating-point tensor in ``batch`` (a tensor, or a tuple, list or dict of them) is finite."""
    if isinstance(batch, torch.Tensor):
        return not batch.is_floating_point() or bool(torch.isfinite(batch).all())
    if isinstance(batch, dict):
        return all(_finite(value) for value in batch.values())
    if isinstance(batch, (list, tuple)):
        return all(_finite(value) for value in batch)
    return True
