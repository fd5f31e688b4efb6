"""Stopping cleanly when the cluster warns that the job is about to end, and requeueing it on SLURM."""

import os
import signal
import subprocess
import threading

from lightfed.callbacks.base import Callback


class Preemption(Callback):
    """While a run fits, SIGUSR1 (the cluster's warning: ask SLURM for it with ``--signal=USR1@120``) and SIGTERM
    (``scancel``, a preemption, the time limit) do not kill the process but ask the run to stop
    (``trainer.stop_requested``). The request is read when the round in flight reduces its sums, so every process
    finishes that round, writes its checkpoint and stops cleanly; after SIGUSR1 a SLURM job is also requeued (after
    SIGTERM SLURM decides). A round that outlasts SLURM's KillWait is lost to the SIGKILL that follows; the previous
    checkpoint stays whole."""

    def __init__(self) -> None:
        self._previous: dict[int, object] = {}
        self.received: int | None = None

    def on_fit_start(self, trainer) -> None:
        self.received = None
        if threading.current_thread() is not threading.main_thread():  # Python only delivers signals there
            return

        def request_stop(signum: int, frame: object) -> None:
            self.received = signum
            trainer.stop_requested = True

        self._previous = {signum: signal.signal(signum, request_stop) for signum in (signal.SIGUSR1, signal.SIGTERM)}

    def on_fit_end(self, trainer, metrics: dict[str, float]) -> None:
        self._restore()
        if not (trainer.stop_requested and trainer.should_stop and trainer.round < trainer.rounds):
            return
        job_id = slurm_job_id() if self.received != signal.SIGTERM else None  # the request may come from another process
        trainer.fabric.print(  # before the requeue: SLURM then ends this job at once, unflushed output with it
            f"stopped on request after round {trainer.round}; {trainer.checkpoint_path} holds it"
            + (f"; SLURM job {job_id} requeued" if job_id else "; resume with --ckpt_path last"),
            flush=True,
        )
        if trainer.fabric.is_global_zero and job_id is not None:
            requeue_slurm_job(job_id)

    def on_exception(self, trainer, error: BaseException) -> None:
        self._restore()

    def _restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}


def slurm_job_id() -> str | None:
    """The id ``scontrol requeue`` takes: ``<array job>_<task>`` for array tasks, else the job id; None off SLURM."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None:
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def requeue_slurm_job(job_id: str) -> None:
    """Puts the job back in the queue; it restarts with the same command (which resumes with ``--ckpt_path auto``)."""
    subprocess.run(["scontrol", "requeue", job_id], check=True)
