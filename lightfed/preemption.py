"""Stopping cleanly when the cluster warns that the job is about to end, and requeueing it on SLURM."""

import os
import signal
import subprocess
import threading
from types import TracebackType


class PreemptionSignal:
    """While active, a signal (SIGUSR1 by default: ask SLURM for it with ``--signal=USR1@120``) does not kill the
    process but sets ``requested``; the trainer then writes a checkpoint at the end of the round and stops."""

    def __init__(self, signum: int = signal.SIGUSR1) -> None:
        self.signum = signum
        self.requested = False
        self._previous = None

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True

    def __enter__(self) -> "PreemptionSignal":
        if threading.current_thread() is threading.main_thread():  # Python only delivers signals there
            self._previous = signal.signal(self.signum, self._handle)
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        if self._previous is not None:
            signal.signal(self.signum, self._previous)


def slurm_job_id() -> str | None:
    """The id ``scontrol requeue`` takes: ``<array job>_<task>`` for array tasks, else the job id; None off SLURM."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None:
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def requeue_slurm_job(job_id: str) -> None:
    """Puts the job back in the queue; it restarts with the same command (which resumes with ``--ckpt_path auto``)."""
    subprocess.run(["scontrol", "requeue", job_id], check=True)
