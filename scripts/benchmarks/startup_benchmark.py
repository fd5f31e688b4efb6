"""Start-up of the quickstart: seconds from the command to the first round's start and to exit, on 1 and 2 processes,
beside ``python -c "import torch"`` and ``python -c "import lightning"`` (median of ``--repeats`` interleaved runs).

    python scripts/benchmarks/startup_benchmark.py [--repeats 5] [--rounds 1]

The first round's start is stamped by ``FirstRoundStamp``, a callback this script adds through the config (process 0
writes the wall-clock time when round 0 starts); the command's start and exit are taken here around the subprocess.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lightfed.callbacks.base import Callback

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/: the shared harness
import harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class FirstRoundStamp(Callback):
    """Writes ``time.time()`` to ``path`` when round 0 starts, on process 0."""

    def __init__(self, path: str):
        self.path = path

    def on_round_start(self, trainer, round: int) -> None:
        if round == 0 and trainer.fabric.is_global_zero:
            Path(self.path).write_text(repr(time.time()))


def timed(command: list[str], stamp: Path | None = None) -> tuple[float | None, float]:
    """Seconds from starting ``command`` to the stamp it writes (None without one) and to its exit: wall-clock
    time (``time.time``), which the stamp of another process can be compared with."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")]),
    }
    began = time.time()
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ended = time.time()
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr}")
    return (float(stamp.read_text()) - began if stamp else None), ended - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1)
    harness.add_json_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lightfed-startup-") as folder:
        results = measure(Path(folder), args.rounds, args.repeats)
    print(f"median of {args.repeats} runs, {os.cpu_count()} CPU cores, quickstart with trainer.rounds {args.rounds}\n")
    medians = {
        name: (harness.median(first for first, _ in runs if first is not None), harness.median(e for _, e in runs))
        for name, runs in results.items()
    }
    rows = ([name, *(harness.cell(seconds, ".2f") for seconds in pair)] for name, pair in medians.items())
    harness.print_table(["command", "first round s", "exit s"], rows, "lrr")
    figures = {name: {"first_round_s": first, "exit_s": ended} for name, (first, ended) in medians.items()}
    harness.write_json(args.json, {name: {**figures[name], "runs": runs} for name, runs in results.items()})


def measure(work: Path, rounds: int, repeats: int) -> dict[str, list[tuple[float | None, float]]]:
    """Each case's (first round s, exit s) in ``repeats`` interleaved runs, with run folders under ``work``."""
    stamp = work / "first_round"
    overlay = work / "overlay.yaml"
    overlay.write_text(
        f"trainer:\n  rounds: {rounds}\n  root_dir: {work / 'runs'}\n  progress_bar: false\n"
        f"  callbacks:\n    - class_path: startup_benchmark.FirstRoundStamp\n      init_args:\n        path: {stamp}\n"
    )
    fit = [sys.executable, "-m", "lightfed", "fit", "-c", "configs/quickstart.yaml", "-c", str(overlay)]
    cases = {
        'python -c "import torch"': ([sys.executable, "-c", "import torch"], False),
        'python -c "import lightning"': ([sys.executable, "-c", "import lightning"], False),
        "quickstart, 1 process": ([*fit, "--trainer.devices", "1"], True),
        "quickstart, 2 processes": ([*fit, "--trainer.devices", "2"], True),
    }
    results: dict[str, list[tuple[float | None, float]]] = {name: [] for name in cases}
    timed(cases["quickstart, 1 process"][0], stamp)  # warm the file cache and the dataset
    for _, name in harness.interleave(list(cases), repeats):
        command, stamped = cases[name]
        stamp.unlink(missing_ok=True)
        results[name].append(timed(command, stamp if stamped else None))
    return results


if __name__ == "__main__":
    main()
