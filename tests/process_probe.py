"""Writes, from each process of a run, what the start-up test checks about how that process began."""

import json
import os
from pathlib import Path

from lightfed import launcher
from lightfed.callbacks import Callback


class RecordProcess(Callback):
    def on_fit_start(self, trainer):
        record = {"pid": os.getpid(), "parent": os.getppid(), "forked": launcher.is_fork()}
        folder = Path(os.environ["LIGHTFED_TEST_PROBE"])
        (folder / f"rank_{trainer.fabric.global_rank}.json").write_text(json.dumps(record))


class FailOnSecondProcess(Callback):
    def on_round_start(self, trainer, round):
        if trainer.fabric.global_rank == 1:
            raise RuntimeError("process 1 fails")
