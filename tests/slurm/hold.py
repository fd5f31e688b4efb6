"""A callback the SLURM tests put into a job: it holds the run at a round until the job is signalled, so that a
requeue lands mid-run however slow the machine is."""

import os
import time
from pathlib import Path

from lightfed.callbacks import Callback


class HoldUntilSignalled(Callback):
    """On the job's first start (``SLURM_RESTART_COUNT`` unset or 0), when round ``round`` (1-based) begins, writes
    ``marker`` (process 0) and waits on every process until a signal asks the run to stop (at most ``timeout`` s); the
    round then runs and the run stops after it with its checkpoint."""

    def __init__(self, marker: str, round: int = 2, timeout: float = 600) -> None:
        self.marker, self.round, self.timeout = Path(marker), round, timeout

    def on_round_start(self, trainer, round):
        if round + 1 != self.round or int(os.environ.get("SLURM_RESTART_COUNT", "0")) > 0:
            return
        if trainer.fabric.global_rank == 0:
            self.marker.write_text(f"held at round {self.round}\n")
        deadline = time.monotonic() + self.timeout
        while not trainer.stop_requested and time.monotonic() < deadline:
            time.sleep(0.1)
