"""The processes of a single-node CPU run started as forks of the ``lightfed`` command's process, and ended together.

Process 0 forks processes 1, 2, ... once the command line is parsed (``start``); a thread per fork waits for it. When
one fails, the others and process 0 end too; a fork leaves with ``os._exit`` after its exit handlers, as
multiprocessing's forks do (``leave``). A fork hands its ``lightfed: error:`` line to process 0, which prints each
different line once (``say_error``). Ctrl-C before or after the rounds, or a second one during them, ends every
process at once (``stop_at_once``).
"""

import os
import select
import signal
import sys
import threading
import traceback
import warnings
from contextlib import suppress

from lightfed.adapters import run_exit_handlers
from lightfed.run.cores import share_cores


class Forks:
    """The processes this one forked (processes 1, 2, ... of the run), each waited for by a thread; when one fails,
    the others and this one are ended unless they end by themselves within ``grace_s`` (a process busy training would
    learn of it only at its next collective)."""

    def __init__(self, pids: list[int], errors: int, grace_s: float = 5.0):
        self.errors = errors  # the read end of the pipe the forks write their error lines to
        self.ranks = {pid: rank for rank, pid in enumerate(pids, start=1)}
        self.running, self.grace_s = set(pids), grace_s
        self.failure: int | None = None  # the exit code of the first process that failed
        self.failed_rank: int | None = None
        self.failed = threading.Event()
        self.ending = threading.Event()  # set when this process's run returned or raised
        self._lock = threading.RLock()  # also taken by the Ctrl-C handler, which runs between this thread's steps
        self._waiters = [threading.Thread(target=self._wait, args=(pid,), daemon=True) for pid in pids]
        for waiter in self._waiters:
            waiter.start()

    def _wait(self, pid: int) -> None:
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        with self._lock:
            self.running.discard(pid)
            if code == 0 or self.failure is not None:
                return
            self.failure, self.failed_rank = code, self.ranks[pid]
        self.failed.set()
        ended = self.ending.wait(self.grace_s)
        self.kill_running()
        if not ended:  # busy outside a collective: said here, as the collective would have
            print_fork_errors()
            os.write(
                2,
                f"lightfed: error: process {self.ranks[pid]} of {len(self.ranks) + 1} {ended_how(code)}; the "
                "run stops: resume it from its last checkpoint with --ckpt_path last\n".encode(),
            )
            os.kill(os.getpid(), signal.SIGKILL)

    def lost(self) -> tuple[int, str] | None:
        """The process that was stopped or ended with an error, and how (``(1, "died (killed by SIGKILL)")``)."""
        for pid, rank in self.ranks.items():
            try:
                stopped = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # it ended, and its waiter has it
                continue
            if stopped is not None and stopped.si_code == os.CLD_STOPPED:
                return rank, f"was stopped ({signal.Signals(stopped.si_status).name})"
        self.failed.wait(2.0)  # a process's connections close a moment before its end can be waited for
        if self.failure is None or self.failed_rank is None:
            return None
        return self.failed_rank, ended_how(self.failure)

    def kill_running(self) -> None:
        with self._lock:
            for pid in self.running:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def finish(self, failed: bool) -> None:
        """This process's run ended: waits for the others (``grace_s`` at most after a failure, then ends them)."""
        self.ending.set()
        for waiter in self._waiters:
            waiter.join(self.grace_s if failed else None)
        self.kill_running()
        for waiter in self._waiters:
            waiter.join(self.grace_s)  # each has what it ended: none is left a zombie


def ended_how(code: int) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it)."""
    return f"died (killed by {signal.Signals(-code).name})" if code < 0 else f"exited with status {code}"


_forks: Forks | None = None  # in the process that forked the others
_parent: int | None = None  # in a fork: the process it was forked from (process 0 of the run)
_errors_to_parent: int | None = None  # in a fork: the write end of the pipe to process 0
_printed: set[str] = set()  # in process 0: the error lines printed so far


def quiet_srun_hint() -> None:
    """Silences Lightning's hint that ``srun`` is on the PATH but not used, outside a SLURM job (no ``SLURM_JOB_ID``),
    where it would print on every run and nothing is to be done."""
    if "SLURM_JOB_ID" not in os.environ:
        warnings.filterwarnings("ignore", message="The `srun` command is available on your system but is not used")


def start(trainer: dict) -> None:
    """Starts processes 1.. of a single-node CPU run (``trainer``: the parsed trainer settings) as forks of this one,
    which has imported and parsed everything already (Lightning would start each as a new interpreter that does both
    again), each process with its share of the cores as torch's threads (``share_cores``). The forks find the
    launcher's environment variables, so ``Fabric.launch`` starts nothing more; with threads running Lightning starts
    the processes, which find the share in ``OMP_NUM_THREADS``; elsewhere (a GPU, several nodes, a cluster's own
    launcher) this does nothing and Lightning starts the processes and sets their threads as usual."""
    quiet_srun_hint()
    from lightning.fabric.plugins.environments import (
        LightningEnvironment,
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    devices = trainer.get("devices")
    devices = int(devices) if isinstance(devices, int) or (isinstance(devices, str) and devices.isdigit()) else 0
    clusters = (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment)  # Fabric's, in its order
    if (
        trainer.get("accelerator") != "cpu"
        or trainer.get("num_nodes", 1) != 1
        or "LOCAL_RANK" in os.environ
        or any(cluster.detect() for cluster in clusters)
    ):
        return
    share_cores(max(devices, 1))  # this process and those it starts: each its share of the cores
    if devices < 2 or not hasattr(os, "fork") or threading.active_count() > 1:
        return
    environment = LightningEnvironment()  # the variables Lightning's subprocess launcher sets
    os.environ["MASTER_ADDR"] = environment.main_address
    os.environ["MASTER_PORT"] = str(environment.main_port)
    os.environ["NODE_RANK"] = "0"
    os.environ["WORLD_SIZE"] = str(devices)
    os.environ["LOCAL_RANK"] = "0"
    sys.stdout.flush()
    sys.stderr.flush()
    children, parent = [], os.getpid()
    errors, errors_to_parent = os.pipe()
    for local_rank in range(1, devices):
        pid = os.fork()
        if pid == 0:
            global _parent, _errors_to_parent
            _parent, _errors_to_parent = parent, errors_to_parent
            os.close(errors)
            os.environ["LOCAL_RANK"] = str(local_rank)
            return
        children.append(pid)
    os.close(errors_to_parent)
    os.set_blocking(errors, False)
    global _forks
    _forks = Forks(children, errors)


def is_fork() -> bool:
    """Whether this process is a fork that ``start`` made."""
    return _parent is not None


def lost_process() -> tuple[int, str] | None:
    """After a collective failed: the process that was lost and how, where this process knows it (process 0 from
    its waiters; a fork whose parent is gone)."""
    if _forks is not None:
        return _forks.lost()
    return (0, "died") if is_fork() and os.getppid() != _parent else None


def finish(failed: bool) -> int | None:
    """This process's run ended (``failed``: by an error): waits for the forks, ends those still running after a
    failure, and returns the exit code the command ends with if a fork failed."""
    if _forks is None:
        return None
    _forks.finish(failed)
    return None if _forks.failure is None else _forks.failure if _forks.failure > 0 else 1


def say_error(line: str) -> None:
    """Prints a ``lightfed: error:`` line once for the whole run: a fork hands it to process 0 (while there is one);
    process 0 prints it, then each line of the forks' that differs from the lines it printed."""
    if _errors_to_parent is not None and os.getppid() == _parent:
        encoded = line.encode()
        if len(encoded) > select.PIPE_BUF:  # one write of at most PIPE_BUF bytes is never interleaved with another's
            encoded = encoded[: select.PIPE_BUF - 1] + b"\n"
        with suppress(BrokenPipeError):  # else process 0 is gone: this process says it
            os.write(_errors_to_parent, encoded)
            return
    sys.stderr.write(line)
    sys.stderr.flush()
    _printed.add(line)
    print_fork_errors()


def print_fork_errors() -> None:
    """Process 0: prints the error lines the forks handed over and it has not printed yet."""
    if _forks is None:
        return
    received = b""
    while True:
        try:
            chunk = os.read(_forks.errors, 65536)
        except BlockingIOError:  # nothing more now (a fork's DataLoader worker may hold the pipe open)
            break
        if not chunk:
            break
        received += chunk
    for line in received.decode(errors="replace").splitlines(keepends=True):
        if line not in _printed:
            _printed.add(line)
            sys.stderr.write(line)
    sys.stderr.flush()


def stop_at_once(signum: int, frame: object) -> None:
    """SIGINT handler of the command: Ctrl-C before or after a run's rounds, or a second one during them, ends every
    process of the command now."""
    if not is_fork():
        os.write(
            2,
            b"lightfed: stopped at once (Ctrl-C); the checkpoints written so far are whole: resume with "
            b"--ckpt_path last\n",
        )
    if _forks is not None:
        _forks.kill_running()
        _forks.finish(failed=True)
    end_by_sigint()


def end_by_sigint() -> None:
    """Ends this process as Ctrl-C ends a program: by SIGINT, status 130 in a shell (which then stops a loop too)."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def leave(error: BaseException | None = None) -> None:
    """Ends a fork after its run (``error``: what ended it; a traceback unless it is an exit): its exit handlers and
    output, not the interpreter's teardown (its parent's work)."""
    code: int | str | None = 0  # also after Ctrl-C: it stopped after a round, as process 0 did
    if isinstance(error, SystemExit):
        code = error.code
    elif error is not None and not isinstance(error, KeyboardInterrupt):
        traceback.print_exception(error)
        code = 1
    run_exit_handlers()
    if isinstance(code, str):
        print(code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)
