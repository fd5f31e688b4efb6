"""An evaluation pass of the global model (its weights loaded into the live module, a step over batches), and the
round with the best validation metric."""

import math
from collections.abc import Iterable
from typing import Any

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


class BestRound:
    """The evaluated round with the best validation ``monitor`` so far (lower is better for a loss, the first of equal
    values counts), with a copy of that round's global weights; its state goes into checkpoints."""

    def __init__(self, monitor: str) -> None:
        self.monitor = monitor
        self.lower_is_better = "loss" in monitor
        self.round: int | None = None
        self.value: float | None = None
        self.params: Tensor | None = None
        self.buffers: Tensor | None = None

    def update(self, round: int, metrics: dict[str, float], params: Tensor, buffers: Tensor) -> None:
        """Keeps round ``round``'s weights when its ``metrics`` hold a finite ``monitor`` better than the best so far."""
        value = metrics.get(self.monitor)
        if value is None or not math.isfinite(value):
            return
        if self.value is None or (value < self.value if self.lower_is_better else value > self.value):
            self.round, self.value = round, float(value)
            self.params, self.buffers = params.clone(), buffers.clone()

    def state_dict(self) -> dict[str, Any] | None:
        if self.round is None:
            return None
        return {"monitor": self.monitor, "round": self.round, "value": self.value, "params": self.params.cpu(),
                "buffers": self.buffers.cpu()}

    def load_state_dict(self, state: dict[str, Any] | None, device: torch.device) -> None:
        """Restores a checkpoint's best round; one chosen on another monitor (or none) leaves it empty."""
        if state is None or state["monitor"] != self.monitor:
            return
        self.round, self.value = state["round"], state["value"]
        self.params, self.buffers = state["params"].to(device), state["buffers"].to(device)
