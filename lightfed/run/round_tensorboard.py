"""The run folder's TensorBoard logger: Fabric's, writing the scalars of one ``log_metrics`` call as one event."""

import time
from collections.abc import Mapping
from typing import Any

from lightning.fabric.loggers import TensorBoardLogger
from lightning.fabric.utilities.rank_zero import rank_zero_only

from lightfed.adapters import tensorboard_file_writer


class RoundTensorBoardLogger(TensorBoardLogger):
    """Fabric's ``TensorBoardLogger`` (built without a prefix) whose ``log_metrics`` writes a round's numbers as one
    event with a value each, as TensorBoard reads them back: Fabric's writes an event per number (``add_scalar``),
    which for a round's 9 numbers took 0.56 ms, a tenth of a round of many tiny clients, against 0.08 ms. Anything
    but plain numbers (tensors, dicts of scalars) goes to Fabric's ``log_metrics``."""

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        if not all(isinstance(value, (int, float)) for value in metrics.values()):
            super().log_metrics(metrics, step)
            return
        from tensorboard.compat.proto.summary_pb2 import Summary  # type: ignore[import-untyped]  # (when a run logs)

        values = [Summary.Value(tag=name, simple_value=float(value)) for name, value in metrics.items()]
        tensorboard_file_writer(self).add_summary(Summary(value=values), step, time.time())
