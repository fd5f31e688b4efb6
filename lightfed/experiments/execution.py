"""A sweep's runs trained in this process or in a pool of processes forked from it, each in one line when it ends."""

import contextlib
import io
import multiprocessing
import multiprocessing.synchronize
import signal
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import FrameType

from lightfed.errors import DivergenceError, LightfedError
from lightfed.experiments.plan import Run, setting_label
from lightfed.experiments.sweep_specs import SpecError
from lightfed.run.cores import available_cores

_stopping: multiprocessing.synchronize.Event | None = None  # a pool worker's: set once Ctrl-C stopped the sweep
_running = False  # whether this pool worker is training a run


def divergence_marker(runs_dir: Path, name: str) -> Path:
    """Written when a run's weights became NaN/Inf, so that ``collect`` counts it (as not usable), not as missing."""
    return runs_dir / name / "diverged.txt"


def print_line(line: str) -> None:
    """Prints ``line`` in one write, so that the lines of parallel workers do not run into each other."""
    print(line + "\n", end="", flush=True)


def execute(run: Run, index: int, total: int, metric: str, runs_dir: Path) -> tuple[bool, float]:
    """Trains one run in this process, what it prints kept from the terminal (its logs hold it); prints one line when
    it ends. Returns whether lightfed accepted it and its wall time in seconds."""
    from lightfed.subcommands import run as lightfed_run

    tag = f"[{index + 1}/{total}] {run.stem} {setting_label(run.setting)} seed={run.seed}"
    began = time.perf_counter()
    marker = divergence_marker(runs_dir, run.name)
    marker.unlink(missing_ok=True)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            metrics = lightfed_run(run.argv)
    except LightfedError as error:
        print_line(f"{tag}: failed: {error}")
        if isinstance(error, DivergenceError):
            marker.write_text(f"{error}\n")
        return False, time.perf_counter() - began
    seconds = time.perf_counter() - began
    if metric not in metrics:
        raise SpecError(f"--metric {metric} is not among the run's metrics ({', '.join(sorted(metrics))})")
    print_line(f"{tag}: {metric}={metrics[metric]:.4f} ({seconds:.1f} s)")
    return True, seconds


def execute_all(runs: list[Run], metric: str, runs_dir: Path, workers: int) -> bool:
    """Trains every run, ``workers`` at a time (one after the other in this process if 1), and prints the sweep's wall
    time against the sum of the runs' own; False if lightfed refused a run. After Ctrl-C no further run starts: the
    runs in flight stop after their round and ``KeyboardInterrupt`` is raised once they have."""
    began = time.perf_counter()
    jobs = [(run, index, len(runs), metric, runs_dir) for index, run in enumerate(runs)]
    workers = min(workers, len(runs))
    if workers == 1:
        outcomes = [execute(*job) for job in jobs]
    else:
        import torch

        import lightfed.subcommands  # noqa: F401  (imported once, here: the forked workers start with it and Lightning)

        context = multiprocessing.get_context("fork")
        threads, stopping = max(1, available_cores() // workers), context.Event()
        pool = ProcessPoolExecutor(workers, context, _start_worker, (torch.set_num_threads, threads, stopping))
        try:  # a worker that dies (out of memory) raises BrokenProcessPool here rather than hanging the sweep
            pooled = [future.result() for future in [pool.submit(_execute_in_pool, *job) for job in jobs]]
        except KeyboardInterrupt:
            stopping.set()
            raise
        finally:
            pool.shutdown(cancel_futures=True)  # after an error or Ctrl-C, no further run starts
        if None in pooled:  # a worker's run was stopped by Ctrl-C (sent to it alone)
            raise KeyboardInterrupt
        outcomes = [outcome for outcome in pooled if outcome is not None]
    wall = time.perf_counter() - began
    run_time = sum(seconds for _, seconds in outcomes)
    print(
        f"compare: {len(runs)} runs in {wall:.1f} s wall, {run_time:.1f} s of run time ({run_time / wall:.2f}x)",
        flush=True,
    )
    return all(ok for ok, _ in outcomes)


def _start_worker(
    set_threads: Callable[[int], None], threads: int, stopping: multiprocessing.synchronize.Event
) -> None:
    """A pool worker's start: its torch threads, and Ctrl-C stops the sweep (between runs it only marks it stopped)."""
    global _stopping
    set_threads(threads)
    _stopping = stopping

    def on_ctrl_c(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        if _running:  # before the run listens for Ctrl-C itself (it stops after its round then)
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_ctrl_c)


def _execute_in_pool(run: Run, index: int, total: int, metric: str, runs_dir: Path) -> tuple[bool, float] | None:
    """``execute`` in a pool worker; None if Ctrl-C stopped the sweep, before the run or during it."""
    global _running
    assert _stopping is not None, "a pool worker starts with _start_worker"
    _running = True
    try:
        if _stopping.is_set():
            return None
        return execute(run, index, total, metric, runs_dir)
    except KeyboardInterrupt:
        _stopping.set()
        return None
    finally:
        _running = False
