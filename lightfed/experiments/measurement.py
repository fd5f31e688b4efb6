"""What the benchmark scripts measure in a run, and how a run's processes hand their numbers to the script that
started them: one ``BENCH_RESULT {json}`` line on stdout per process."""

import itertools
import json
import os
import resource
import sys

RESULT_TAG = "BENCH_RESULT "


def emit(result: dict) -> None:
    """Prints ``result`` as this process's result line."""
    print(RESULT_TAG + json.dumps(result), flush=True)


def result_lines(stdout: str) -> list[dict]:
    """The result lines of a run's output."""
    return [json.loads(line[len(RESULT_TAG) :]) for line in stdout.splitlines() if line.startswith(RESULT_TAG)]


def round_periods(began: float, ends: list[float]) -> list[float]:
    """Per-round durations from the start and the end times of the rounds."""
    return [b - a for a, b in itertools.pairwise([began, *ends])]


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (``ru_maxrss`` is in KiB on Linux, bytes on macOS)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)


def set_threads(threads: int) -> None:
    """``threads`` intra-op threads for torch in this process, and for Fabric, which leaves the count alone when
    ``OMP_NUM_THREADS`` is set."""
    import torch

    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
