"""Callbacks observe the round loop: the progress bar and early stopping are built in; users add their own with
``trainer.callbacks``."""

from lightfed.callbacks.base import Callback, TrainerState
from lightfed.callbacks.early_stopping import EarlyStopping
from lightfed.callbacks.progress_bar import ProgressBar

__all__ = ["Callback", "EarlyStopping", "ProgressBar", "TrainerState"]
