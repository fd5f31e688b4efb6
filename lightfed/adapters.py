"""The only place lightfed touches other libraries' private attributes; each use has a test in tests/test_adapters.py that fails when the library changes."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from lightning import LightningModule
from lightning.fabric.loggers import TensorBoardLogger
from lightning.fabric.strategies import DDPStrategy

if TYPE_CHECKING:
    from torch.utils.tensorboard.writer import FileWriter

Module = TypeVar("Module", bound=LightningModule)


def copy_without_trainer(module: Module) -> Module:
    """A deep copy of ``module`` whose trainer reference (``LightningModule._trainer``) is None, not a copied trainer."""
    return copy.deepcopy(module, {id(module._trainer): None})


def set_collective_timeout(fabric: Any, seconds: float) -> None:
    """Sets how long a process waits in a collective: what ``DDPStrategy(timeout=)`` keeps in ``_timeout``."""
    if isinstance(fabric.strategy, DDPStrategy):  # several processes
        fabric.strategy._timeout = timedelta(seconds=seconds)


def tensorboard_file_writer(logger: TensorBoardLogger) -> FileWriter:
    """The writer Lightning's own ``log_hyperparams`` writes summaries to (``SummaryWriter._get_file_writer``)."""
    return logger.experiment._get_file_writer()
