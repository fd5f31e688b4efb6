"""An evaluation pass of the global model: its weights loaded into the live module, a step over batches."""

from collections.abc import Iterable

import torch
from lightning.fabric import Fabric
from lightning.pytorch.utilities.data import extract_batch_size
from torch import Tensor

from lightfed.core.client import ClientTrainer
from lightfed.core.logged_values import LoggedValues


def evaluation_pass(
    fabric: Fabric, client: ClientTrainer, params: Tensor, buffers: Tensor, step: str, batches: Iterable
) -> LoggedValues:
    """Runs the module's ``step`` ("validation_step" or "test_step") on ``batches`` at the given global weights, with
    the hooks of that stage around it (``on_validation_start``, ``on_validation_epoch_start``, per batch
    ``on_validation_batch_start``/``_end``, ...); returns what it logged (reduce it with ``compute``)."""
    client.flat.load(params, buffers)
    module = client.module
    module.eval()
    stage = step.removesuffix("_step")
    step_fn = getattr(module, step)
    logged = LoggedValues()
    client.view._enter("validate" if stage == "validation" else "test")
    with torch.no_grad(), logged.attached(module):
        getattr(module, f"on_{stage}_start")()
        getattr(module, f"on_{stage}_epoch_start")()
        for batch_idx, batch in enumerate(batches):
            logged.batch_size = extract_batch_size(batch)
            getattr(module, f"on_{stage}_batch_start")(batch, batch_idx)
            with fabric.autocast():
                output = step_fn(batch, batch_idx)
            getattr(module, f"on_{stage}_batch_end")(output, batch, batch_idx)
        getattr(module, f"on_{stage}_epoch_end")()
        getattr(module, f"on_{stage}_end")()
    client.view._enter("")
    return logged
