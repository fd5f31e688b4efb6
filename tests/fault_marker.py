"""Writes a file when a run's rounds begin, so the fault-injection test kills it only once it is training."""

import os
from pathlib import Path

from lightfed.callbacks import Callback


class MarkTrainingStarted(Callback):
    def on_fit_start(self, trainer):
        if trainer.fabric.is_global_zero:
            Path(os.environ["LIGHTFED_TEST_MARKER"]).touch()
