"""Stands in for ``LightningModule.log`` inside lightfed's loops and reduces what was logged over one pass."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from lightning.fabric import Fabric
from lightning import LightningModule
from torch import Tensor
from torchmetrics import Metric


class LoggedValues:
    """Batch-size-weighted means of logged scalars, and ``compute()`` of logged torchmetrics objects.

    Values stay on the device while a pass runs: no host synchronisation per step.
    """

    def __init__(self) -> None:
        self.batch_size = 1
        self._sums: dict[str, Tensor] = {}
        self._counts: dict[str, float] = {}
        self._metrics: dict[str, Metric] = {}

    def log(self, name: str, value: Any, *args: Any, batch_size: int | None = None, **kwargs: Any) -> None:
        """Same call as ``LightningModule.log``; options other than ``batch_size`` are ignored."""
        if isinstance(value, Metric):
            self._metrics[name] = value
            return
        n = batch_size or self.batch_size
        value = value.detach().float() if isinstance(value, Tensor) else torch.tensor(float(value))
        previous = self._sums.get(name)
        if previous is None:
            self._sums[name] = value * n  # a new tensor: the logged one is never written to
        else:
            previous.add_(value.to(previous.device), alpha=n)
        self._counts[name] = self._counts.get(name, 0.0) + n

    def log_dict(self, dictionary: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        for name, value in dictionary.items():
            self.log(name, value, *args, **kwargs)

    @contextmanager
    def attached(self, module: LightningModule) -> Iterator["LoggedValues"]:
        """Routes ``module.log``/``module.log_dict`` here for the duration of the block."""
        module.log, module.log_dict = self.log, self.log_dict
        try:
            yield self
        finally:
            del module.log, module.log_dict

    def compute(self, fabric: Fabric | None = None) -> dict[str, float]:
        """Means and metric values, reduced over all processes when ``fabric`` is given; then starts afresh."""
        names = sorted(self._sums)
        if fabric is not None and fabric.world_size > 1:  # a process that trained no client logged nothing
            everyone: list = [None] * fabric.world_size
            torch.distributed.all_gather_object(everyone, names)
            names = sorted(set().union(*everyone))
        result: dict[str, float] = {}
        if names:
            zero = torch.zeros((), device=fabric.device if fabric is not None else "cpu")
            sums = [self._sums.get(n, zero).to(zero.device) for n in names]
            counts = [torch.tensor(self._counts.get(n, 0.0), device=zero.device) for n in names]
            packed = torch.stack(sums + counts)
            if fabric is not None:
                packed = fabric.all_reduce(packed, reduce_op="sum")
            totals = packed.tolist()
            result = {n: totals[i] / totals[i + len(names)] for i, n in enumerate(names)}
        self._sums.clear()
        self._counts.clear()
        for name, metric in sorted(self._metrics.items()):
            metric._to_sync = fabric is not None  # torchmetrics syncs over processes unless told not to
            result[name] = float(metric.compute())
            metric._to_sync = metric.sync_on_compute
            metric.reset()
        self._metrics.clear()
        return result
