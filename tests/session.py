"""A command run in a process session of its own, which must be empty once the command has ended."""

import os
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_in_session(command: list[str], timeout_s: float = 600) -> subprocess.CompletedProcess:
    """Runs ``command`` from the repository root (one torch thread per process); fails if a process of its session
    is still there 60 s after the command ended (a process it started and left behind), killing the session."""
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    finally:
        left = _left(process.pid, wait_s=60)
    assert not left, "processes of the command were left running"
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _left(session: int, wait_s: float) -> bool:
    """Whether a process of ``session`` is still there after ``wait_s`` (an ended one may wait a moment to be
    reaped); what is left is killed."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.killpg(session, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.2)
    os.killpg(session, signal.SIGKILL)
    return True
