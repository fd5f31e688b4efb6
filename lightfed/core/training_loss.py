"""The loss a LightningModule's ``training_step`` returns, however it returns it."""

from collections.abc import Mapping
from typing import Any

from lightning import LightningModule
from torch import Tensor

from lightfed.errors import ConfigError


def training_loss(module: LightningModule, batch: Any, batch_idx: int) -> Tensor:
    """``module.training_step(batch, batch_idx)``'s loss: the tensor it returns, or the one under ``"loss"``."""
    output = module.training_step(batch, batch_idx)
    loss = output["loss"] if isinstance(output, Mapping) else output
    if not isinstance(loss, Tensor):
        raise ConfigError(
            f"{type(module).__name__}.training_step must return the loss (a tensor, or a dict with it under 'loss'), "
            f"got {type(output).__name__}"
        )
    return loss
