"""Stopping cleanly when the cluster warns that the job is about to end, on SIGTERM and on Ctrl-C, and requeueing a
warned job on SLURM."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from lightning.fabric import Fabric

REQUEUE_TIMEOUT_S = 60
_early_requests: set[int] = set()  # SIGUSR1 received before a run listened (``hold_requests``)


def hold_requests() -> None:
    """From now on a SIGUSR1 that comes before a run listens (while the command imports, parses, loads data) is noted
    for the next run to honour instead of ending the process, its default action."""
    signal.signal(signal.SIGUSR1, lambda signum, frame: _early_requests.add(signum))


class Progress(Protocol):
    """What the Ctrl-C acknowledgement says: the rounds done (the round in flight is the next one)."""

    round: int


class Preemption:
    """While a run fits, SIGUSR1 (the cluster's warning: ask SLURM for it with ``--signal=USR1@120``), SIGTERM
    (``scancel``, a preemption, the time limit) and SIGINT (Ctrl-C) do not end the process but set ``requested``. The
    round engine reads it when the round in flight reduces its sums, so every process finishes that round, writes its
    checkpoint and stops cleanly. After SIGUSR1 a SLURM job is also requeued (after SIGTERM SLURM decides); a SIGUSR1
    held from before the run began (``hold_requests``) stops it after its first round. After Ctrl-C, ``fit`` raises
    ``KeyboardInterrupt`` once the checkpoint is written; a second Ctrl-C does at once what Ctrl-C did before the run
    began. A round that outlasts SLURM's KillWait is lost to the SIGKILL that follows; the previous checkpoint stays
    whole."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.received: set[int] = set()
        self._previous: dict[int, Any] = {}

    def listen(self, fabric: Fabric, progress: Progress) -> None:
        """Installs the handlers (in the main thread: Python delivers signals only there) and takes a held request."""
        self.requested.clear()
        self.received = set(_early_requests)
        if _early_requests:
            _early_requests.clear()
            self.requested.set()
        if threading.current_thread() is not threading.main_thread():
            return

        def request_stop(signum: int, frame: FrameType | None) -> Any:
            if signum == signal.SIGINT and signum in self.received:
                previous = self._previous[signum]
                return (previous if callable(previous) else signal.default_int_handler)(signum, frame)
            self.received.add(signum)
            self.requested.set()
            if signum == signal.SIGINT and fabric.is_global_zero:  # one raw write: safe in a signal handler
                os.write(
                    2,
                    f"\nlightfed: Ctrl-C: stopping after round {progress.round + 1}, which is in flight; "
                    "Ctrl-C again stops at once\n".encode(),
                )

        listened = [signal.SIGUSR1, signal.SIGTERM]
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # a background job's Ctrl-C is not for it
            listened.append(signal.SIGINT)
        self._previous = {signum: signal.signal(signum, request_stop) for signum in listened}

    def stop_listening(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def finish(self, fabric: Fabric, round: int, checkpoint: Path) -> None:
        """After a run that stopped on request after ``round`` (its ``checkpoint``): says how to resume, requeues a
        warned SLURM job, and raises ``KeyboardInterrupt`` after Ctrl-C."""
        # after SIGUSR1, or a request from another process (every task of a SLURM step is warned alike)
        job_id = slurm_job_id() if not self.received & {signal.SIGTERM, signal.SIGINT} else None
        if fabric.is_global_zero:
            stop_or_requeue(f"stopped on request after round {round}; {checkpoint} holds it", job_id)
        if signal.SIGINT in self.received:
            raise KeyboardInterrupt


def stop_or_requeue(stopped: str, job_id: str | None) -> None:
    """Says how to resume a run that ``stopped``, or requeues its SLURM job, on stderr (a sweep leaves it to the
    terminal), each line written before anything can end the job."""
    if job_id is None:
        say(f"{stopped}; resume with --ckpt_path last")
        return
    say(f"{stopped}; requeueing SLURM job {job_id}")  # the requeue ends this job at once
    failure = requeue_slurm_job(job_id)
    if failure is None:
        say(f"SLURM job {job_id} requeued")
    else:
        say(
            f"lightfed: the requeue of SLURM job {job_id} failed ({failure}); the checkpoint holds the run: "
            "resume with --ckpt_path last"
        )


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def slurm_job_id() -> str | None:
    """The id ``scontrol requeue`` takes: ``<array job>_<task>`` for array tasks, else the job id; None off SLURM."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array_job is not None:
        return f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ.get("SLURM_JOB_ID")


def requeue_slurm_job(job_id: str) -> str | None:
    """Puts the job back in the queue; it restarts with the same command (which resumes with ``--ckpt_path auto``).
    Returns why that failed, in one line (scontrol's own error), or None."""
    try:
        done = subprocess.run(
            ["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=REQUEUE_TIMEOUT_S
        )
    except OSError as error:
        return f"cannot run scontrol: {error.strerror or error}"
    except subprocess.TimeoutExpired:
        return f"scontrol did not answer within {REQUEUE_TIMEOUT_S} s"
    if done.returncode == 0:
        return None
    return " ".join((done.stderr or done.stdout).split()) or f"scontrol exited with status {done.returncode}"
