"""An evaluation pass of the global model: its weights loaded into the live module, a step over batches."""

from collections.abc import Iterable

import torch
from lightning.fabric import Fabric
from torch import Tensor

from lightfed.core.client import ClientTrainer
from lightfed.core.logged_values import LoggedValues


def evaluation_pass(
    fabric: Fabric, client: ClientTrainer, params: Tensor, buffers: Tensor, step: str, batches: Iterable
) -> LoggedValues:
    """Runs the module's ``step`` ("validation_step" or "test_step") on ``batches`` at the given global weights;
    returns what it logged (reduce it with ``compute``)."""
    client.flat.load(params, buffers)
    module = client.module
    module.eval()
    step_fn = getattr(module, step)
    logged = LoggedValues()
    with torch.no_grad(), logged.attached(module):
        for batch_idx, batch in enumerate(batches):
            logged.batch_size = len(batch[1])
            with fabric.autocast():
                step_fn(batch, batch_idx)
    return logged
