"""Stopping cleanly when the cluster warns that the job is about to end, and requeueing it on SLURM."""

import os
import signal
import subprocess
import threading

from lightfed.callbacks.base import Callback


class Preemption(Callback):
    """While a run fits, a signal (SIGUSR1 by default: ask SLURM for it with ``--signal=USR1@120``) does not kill the
    process but asks the run to stop (``trainer.stop_requested``): the request is reduced with the round in flight,
    so every process writes the checkpoint at the end of that round and stops; under SLURM the job is requeued."""

    def __init__(self, signum: int = signal.SIGUSR1) -> None:
        self.signum = signum
        self._previous = None

    def on_fit_start(self, trainer) -> None:
        if threading.current_thread() is threading.main_thread():  # Python only delivers signals there

            def request_stop(signum: int, frame: object) -> None:
                trainer.stop_requested = True

            self._previous = signal.signal(self.signum, request_stop)

    def on_fit_end(self, trainer, metrics: dict[str, float]) -> None:
        self._restore()
        if not (trainer.stop_requested and trainer.should_stop and trainer.round < trainer.rounds):
            return
        job_id = slurm_job_id()
        if trainer.fabric.is_global_zero and job_id is not None:
            requeue_slurm_job(job_id)
        trainer.fabric.print(
            f"stopped on request after round {trainer.round}; {trainer.checkpoint_path} holds it"
            + (f"; SLURM job {job_id} requeued" if job_id else "; resume with --ckpt_path last")
        )

    def on_exception(self, trainer, error: BaseException) -> None:
        self._restore()

    def _restore(self) -> None:
        if self._previous is not None:
            signal.signal(self.signum, self._previous)
            self._previous = None


def slurm_job_id() -> str | None:
    """The id ``scontrol requeue`` takes: ``<array job>_<task>`` for array tasks, else the job id; None off SLURM."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None:
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def requeue_slurm_job(job_id: str) -> None:
    """Puts the job back in the queue; it restarts with the same command (which resumes with ``--ckpt_path auto``)."""
    subprocess.run(["scontrol", "requeue", job_id], check=True)
