"""Stands in for ``LightningModule.log`` inside lightfed's loops and reduces what was logged over one pass."""

from contextlib import AbstractContextManager
from typing import Any, cast

import torch
from lightning import LightningModule
from lightning.fabric import Fabric
from lightning.pytorch.utilities.data import extract_batch_size
from torch import Tensor
from torchmetrics import Metric

from lightfed.adapters import compute_metric, logging_to
from lightfed.errors import ConfigError


class LoggedValues:
    """Batch-size-weighted means of logged scalars, and ``compute()`` of logged torchmetrics objects.

    Values stay on the device while a pass runs: no host synchronisation per step.
    """

    def __init__(self) -> None:
        self._batch: Any = None
        self._batch_size: int | None = None  # the batch's size, counted when first needed
        self._sums: dict[str, Tensor] = {}
        self._counts: dict[str, float] = {}
        self._metrics: dict[str, Metric] = {}

    @property
    def batch(self) -> Any:
        """The batch being processed: a value logged without ``batch_size`` counts as its size (1 without one)."""
        return self._batch

    @batch.setter
    def batch(self, batch: Any) -> None:
        self._batch, self._batch_size = batch, None

    def _size(self) -> int:
        if self._batch_size is None:
            self._batch_size = 1 if self._batch is None else batch_size_of(self._batch)
        return self._batch_size

    def log(self, name: str, value: Any, *args: Any, batch_size: int | None = None, **kwargs: Any) -> None:
        """Same call as ``LightningModule.log``; options other than ``batch_size`` are ignored."""
        tensor = isinstance(value, Tensor)  # (before torchmetrics' abstract class, whose check takes longer)
        if not tensor and isinstance(value, Metric):
            self._metrics[name] = value
            return
        n = batch_size or self._size()
        value = value.detach().float() if tensor else torch.tensor(float(value))
        previous = self._sums.get(name)
        if previous is None:
            self._sums[name] = value * n  # a new tensor: the logged one is never written to
        else:
            previous.add_(value.to(previous.device), alpha=n)
        self._counts[name] = self._counts.get(name, 0.0) + n

    def log_dict(self, dictionary: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        for name, value in dictionary.items():
            self.log(name, value, *args, **kwargs)

    def attached(self, module: LightningModule) -> AbstractContextManager[None]:
        """Routes ``module.log``/``module.log_dict`` here for the duration of the block."""
        return logging_to(module, self.log, self.log_dict)

    def absorb(self, other: "LoggedValues", module: LightningModule, other_module: LightningModule) -> None:
        """Adds what ``other`` holds (logged by ``other_module``, a copy of ``module``) into this, and clears it."""
        for name, value in other._sums.items():
            previous = self._sums.get(name)
            self._sums[name] = value if previous is None else previous.add_(value.to(previous.device))
            self._counts[name] = self._counts.get(name, 0.0) + other._counts[name]
        for name, metric in other._metrics.items():
            path = _path_in(other_module, metric)
            target = self._metrics.get(name)
            if target is None and path is not None:
                target = _metric_at(module, path)
            if target is None:
                self._metrics[name] = metric
                continue
            target.merge_state(metric)
            metric.reset()
            self._metrics[name] = target
        other._sums, other._counts, other._metrics = {}, {}, {}

    def compute(self, fabric: Fabric | None = None, module: LightningModule | None = None) -> dict[str, float]:
        """Means and metric values, reduced over all processes when ``fabric`` is given; then starts afresh.

        Every process joins the reduction of every name any process logged: a process that logged nothing this pass
        (it trained no client) syncs the same torchmetrics object of its own ``module``, with its empty state.
        """
        names = sorted(self._sums)
        paths = {name: _path_in(module, metric) for name, metric in self._metrics.items()}
        shared = fabric if fabric is not None and fabric.world_size > 1 else None  # one process: no Fabric call
        if shared is not None:
            everyone: list = [None] * shared.world_size
            torch.distributed.all_gather_object(everyone, (names, paths))
            names = sorted(set().union(*(logged for logged, _ in everyone)))
            paths = {name: path for _, logged in everyone for name, path in logged.items()}
            unreachable = sorted(name for name, path in paths.items() if path is None)
            if unreachable:  # refused on every process, before any of them waits in a metric's sync
                raise ConfigError(
                    f"the torchmetrics object logged as {unreachable[0]!r} must be an attribute of the LightningModule, "
                    "so that every process can reduce it, also one that logged nothing this round"
                )
        result: dict[str, float] = {}
        if names:
            zero = torch.zeros((), device=fabric.device if fabric is not None else "cpu")
            sums = [self._sums.get(n, zero).to(zero.device) for n in names]
            counts = [torch.tensor(self._counts.get(n, 0.0), device=zero.device) for n in names]
            packed = torch.stack(sums + counts)
            if shared is not None:
                packed = cast(Tensor, shared.all_reduce(packed, reduce_op="sum"))
            totals = packed.tolist()
            result = {n: totals[i] / totals[i + len(names)] for i, n in enumerate(names)}
        self._sums.clear()
        self._counts.clear()
        for name, path in sorted(paths.items()):
            metric = self._metrics[name] if name in self._metrics else _metric_at(module, path)
            result[name] = float(compute_metric(metric, sync=fabric is not None))
            metric.reset()
        self._metrics.clear()
        return result


def batch_size_of(batch: Any) -> int:
    """Lightning's ``extract_batch_size(batch)``, read directly from a tuple or list of tensors of one length."""
    if type(batch) in (tuple, list) and batch and all(type(t) is Tensor and t.ndim for t in batch):
        size = batch[0].shape[0]
        if all(t.shape[0] == size for t in batch):
            return size
    return extract_batch_size(batch)


def _path_in(module: LightningModule | None, metric: Metric) -> str | None:
    """Where ``metric`` sits in ``module`` (its name in ``named_modules``), None if it is not one of its parts."""
    return next((path for path, part in (module.named_modules() if module is not None else []) if part is metric), None)


def _metric_at(module: LightningModule | None, path: str | None) -> Metric:
    """The torchmetrics object that ``_path_in`` found at ``path`` in ``module``."""
    assert module is not None and path is not None
    return cast(Metric, module.get_submodule(path))
