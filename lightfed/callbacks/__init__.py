"""Callbacks on the round engine: logging, checkpoints, preemption, privacy metrics, per-client evaluation, the
progress bar, the metrics file and early stopping; users add their own with ``trainer.callbacks``."""

from lightfed.callbacks.base import Callback
from lightfed.callbacks.checkpointing import Checkpointing
from lightfed.callbacks.client_evaluation import ClientEvaluation
from lightfed.callbacks.early_stopping import EarlyStopping
from lightfed.callbacks.logging import LogMetrics
from lightfed.callbacks.metrics_file import METRICS_FILE, MetricsFile
from lightfed.callbacks.preemption import Preemption
from lightfed.callbacks.privacy_metrics import PrivacyMetrics
from lightfed.callbacks.progress_bar import ProgressBar

__all__ = [
    "Callback",
    "Checkpointing",
    "ClientEvaluation",
    "EarlyStopping",
    "LogMetrics",
    "METRICS_FILE",
    "MetricsFile",
    "Preemption",
    "PrivacyMetrics",
    "ProgressBar",
]
