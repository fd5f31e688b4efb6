"""The only place lightfed touches other libraries' private attributes; each use has a test in tests/test_adapters.py that fails when the library changes."""

from __future__ import annotations

import atexit
import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from lightning import LightningModule
from lightning.fabric.loggers import CSVLogger, TensorBoardLogger
from lightning.fabric.strategies import DDPStrategy
from torch import Tensor, nn
from torchmetrics import Metric

if TYPE_CHECKING:
    from torch.utils.tensorboard.writer import FileWriter

Module = TypeVar("Module", bound=LightningModule)


def copy_without_trainer(module: Module) -> Module:
    """A deep copy of ``module`` whose trainer reference (``LightningModule._trainer``) is None, not a copied trainer,
    and whose frozen parameters are ``module``'s own (a pretrained base is held once, not once per copy)."""
    frozen = {id(p): p for p in module.parameters() if not p.requires_grad}
    return copy.deepcopy(module, {id(module._trainer): None, **frozen})


def set_collective_timeout(fabric: Any, seconds: float) -> None:
    """Sets how long a process waits in a collective: what ``DDPStrategy(timeout=)`` keeps in ``_timeout``."""
    if isinstance(fabric.strategy, DDPStrategy):  # several processes
        fabric.strategy._timeout = timedelta(seconds=seconds)


def tensorboard_file_writer(logger: TensorBoardLogger) -> FileWriter:
    """The writer Lightning's own ``log_hyperparams`` writes summaries to (``SummaryWriter._get_file_writer``)."""
    return logger.experiment._get_file_writer()


def compute_metric(metric: Metric, sync: bool) -> Tensor:
    """``metric.compute()`` reduced over all processes or not, whatever the metric's ``sync_on_compute``.

    ``compute`` syncs when ``Metric._to_sync`` is set (``sync_on_compute`` sets it only when the metric is built).
    """
    metric._to_sync = sync
    try:
        return metric.compute()
    finally:
        metric._to_sync = metric.sync_on_compute


@contextmanager
def logging_to(module: LightningModule, log: Callable[..., None], log_dict: Callable[..., None]) -> Iterator[None]:
    """Routes ``module.log`` and ``module.log_dict`` to ``log`` and ``log_dict`` for the duration of the block.

    Instance attributes of the same names hide ``LightningModule``'s methods (which need a Lightning ``Trainer``).
    """
    module.log, module.log_dict = log, log_dict  # type: ignore[method-assign]
    try:
        yield
    finally:
        del module.log, module.log_dict


def run_exit_handlers() -> None:
    """Runs the functions registered with ``atexit`` now, as the interpreter would at its end: for a process that
    leaves with ``os._exit`` (a fork) or ends itself by a signal, whose interpreter does not run them."""
    atexit._run_exitfuncs()


def csv_logger_version(logger: CSVLogger) -> int | str | None:
    """The version a CSV logger (Fabric's or Lightning's) was given (``_version``); None when it would pick its own.
    (Its ``version`` property picks one, reading the folder, when it was given none.)"""
    return logger._version


def point_csv_logger_at(logger: CSVLogger, folder: str, version: str) -> None:
    """Makes a CSV logger (Fabric's or Lightning's) that has not written yet write into ``folder/version``: the
    constructor's ``root_dir`` (Lightning's: ``save_dir``) and ``version`` are kept in ``_root_dir`` (``_save_dir``)
    and ``_version``; its ``name`` (``_name``) is emptied so that no level sits between."""
    logger._root_dir = folder
    if hasattr(logger, "_save_dir"):  # Lightning's CSVLogger reads its folder from there
        logger._save_dir = folder
    logger._name, logger._version = "", version


def forward_hooked(module: nn.Module) -> bool:
    """Whether a forward hook or pre-hook runs around ``module`` or one of its submodules (their ``_forward_hooks``
    and ``_forward_pre_hooks``, or torch's global ones): its forward is then not its layers' computation alone."""
    hooks = [torch.nn.modules.module._global_forward_hooks, torch.nn.modules.module._global_forward_pre_hooks]
    return any(hooks) or any(m._forward_hooks or m._forward_pre_hooks for m in module.modules())


class ParameterSlots:
    """The entries of ``Module._parameters`` that hold ``module``'s parameters ``names``, found once, to be swapped
    for other tensors for a block (``holding``), as ``torch.func.functional_call`` swaps them for one call."""

    def __init__(self, module: nn.Module, names: list[str]) -> None:
        self.slots = []
        for name in names:
            owner, _, leaf = name.rpartition(".")
            self.slots.append((module.get_submodule(owner), leaf))

    @contextmanager
    def holding(self, tensors: list[Tensor]) -> Iterator[None]:
        """The parameters replaced by ``tensors`` (in the order of the names) for the block, then restored."""
        saved = [holder._parameters[leaf] for holder, leaf in self.slots]
        for (holder, leaf), tensor in zip(self.slots, tensors, strict=True):
            holder._parameters[leaf] = tensor  # type: ignore[assignment]
        try:
            yield
        finally:
            for (holder, leaf), parameter in zip(self.slots, saved, strict=True):
                holder._parameters[leaf] = parameter
