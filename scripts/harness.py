"""What the benchmarks and studies share: timing (``perf_counter`` wall and ``process_time`` CPU seconds, warm-up,
interleaved repeats, median), ratios against a named reference, a Markdown table, and the figures as JSON
(``--json PATH``).

A script in ``scripts/<folder>/`` finds this module by putting ``scripts/`` first on ``sys.path``; it imports no
torch, so a script's driver process stays light (``synchronizer`` and ``RoundClock`` import it only on a GPU)."""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Sync = Callable[[], object] | None  # waits for the device before a clock is read (None: nothing to wait for)

# ----------------------------------------------------------------------------------------------------------- figures


def median(values: Iterable[float]) -> float:
    """The median of the values that are numbers (NaN left out); NaN when none is."""
    numbers = [value for value in values if not math.isnan(value)]
    return statistics.median(numbers) if numbers else math.nan


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """The first and third quartiles (inclusive: the middle half of the values lies between them)."""
    first, _, third = statistics.quantiles(values, n=4, method="inclusive")
    return first, third


def ratios(values: Mapping[str, float], reference: str) -> dict[str, float]:
    """Each value over the one named ``reference`` (whose own ratio is 1)."""
    return {name: value / values[reference] for name, value in values.items()}


def paired_ratios(values: Sequence[float], references: Sequence[float]) -> list[float]:
    """Each repeat's value over the reference's in the same repeat."""
    return [value / reference for value, reference in zip(values, references, strict=True)]


# ----------------------------------------------------------------------------------------------------------- timing


@dataclass
class Times:
    """Seconds of repeated work: the wall time (``perf_counter``) and this process's CPU time (``process_time``,
    user + system: what other jobs on a shared machine disturb least) of each repeat."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)

    def extend(self, other: Times) -> None:
        self.wall += other.wall
        self.cpu += other.cpu

    def __getitem__(self, repeats: slice) -> Times:
        """These repeats (``times[1:]``: all but the first)."""
        return Times(self.wall[repeats], self.cpu[repeats])

    def measure(self, work: Callable[[], Any], sync: Sync = None) -> Any:
        """Runs ``work`` once, adds its seconds and returns its result; ``sync`` runs before each clock is read."""
        if sync is not None:
            sync()
        cpu, wall = time.process_time(), time.perf_counter()
        result = work()
        if sync is not None:
            sync()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        self.add(wall, cpu)
        return result

    @property
    def median(self) -> float:
        return median(self.wall)

    @property
    def cpu_median(self) -> float:
        return median(self.cpu)

    @property
    def best(self) -> float:
        """The fastest repeat's wall time: the least disturbed by other work."""
        return min(self.wall)

    @property
    def cpu_best(self) -> float:
        return min(self.cpu)


def interleave(names: Sequence[str], repeats: int, alternate: bool = False) -> Iterator[tuple[int, str]]:
    """(repeat, name): every name once per repeat, in order, so that a slow spell of the machine hits all of them;
    with ``alternate`` every other repeat goes in reverse order, so that neither end is always first."""
    for repeat in range(repeats):
        yield from ((repeat, name) for name in (reversed(names) if alternate and repeat % 2 else names))


def time_interleaved(
    work: Mapping[str, Callable[[], Any]], repeats: int, warmup: int = 0, sync: Sync = None, alternate: bool = False
) -> dict[str, Times]:
    """Each work's seconds: ``warmup`` untimed rounds of every work first, then ``repeats`` timed ones, interleaved."""
    for _ in range(warmup):
        for run in work.values():
            run()
    times = {name: Times() for name in work}
    for _, name in interleave(list(work), repeats, alternate):
        times[name].measure(work[name], sync)
    return times


def synchronizer(device: Any) -> Sync:
    """What waits for ``device`` (a ``torch.device`` or its name) before a clock is read: None but on a GPU."""
    import torch

    device = torch.device(device)
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None


class RoundClock:
    """A trainer callback (its hooks are called by name) that notes the wall and CPU seconds at the start and the end
    of every round, with the round's metrics; on a GPU (``sync``) it waits for the device before each reading.

    ``began`` is the start of fitting (``on_fit_start``) unless ``start()`` was called before ``fit``."""

    def __init__(self, sync: bool = False) -> None:
        self.sync = sync
        self.began: tuple[float, float] | None = None
        self.starts: list[tuple[float, float]] = []
        self.ends: list[tuple[float, float]] = []
        self.metrics: list[dict[str, float]] = []

    def now(self, trainer: Any = None) -> tuple[float, float]:
        """(wall, CPU) seconds now."""
        device = getattr(getattr(trainer, "fabric", None), "device", None)
        if self.sync and device is not None and device.type == "cuda":
            import torch

            torch.cuda.synchronize(device)
        return time.perf_counter(), time.process_time()

    def start(self) -> None:
        self.began = self.now()

    def on_fit_start(self, trainer: Any) -> None:
        if self.began is None:
            self.began = self.now(trainer)

    def on_round_start(self, trainer: Any, round: int) -> None:
        self.starts.append(self.now(trainer))

    def on_round_end(self, trainer: Any, round: int, metrics: Mapping[str, float]) -> None:
        self.ends.append(self.now(trainer))
        self.metrics.append(dict(metrics))

    def rounds(self) -> Times:
        """Each round's seconds from its start to its end."""
        return self._spans(self.starts)

    def periods(self) -> Times:
        """Each round's seconds from the end of the one before (the first: from ``began``) to its end."""
        assert self.began is not None, "no round started"
        return self._spans([self.began, *self.ends])

    def _spans(self, starts: list[tuple[float, float]]) -> Times:
        spans = [(end[0] - start[0], end[1] - start[1]) for start, end in zip(starts, self.ends, strict=False)]
        return Times([wall for wall, _ in spans], [cpu for _, cpu in spans])


# ----------------------------------------------------------------------------------------------------------- tables


def cell(value: Any, spec: str = ".4g", missing: str = "-") -> str:
    """A table cell: a number formatted by ``spec``, text as it is, ``missing`` for None and NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return value if isinstance(value, str) else format(value, spec)


def markdown_row(cells: Iterable[Any]) -> str:
    """One row of a Markdown table (``|`` in a cell escaped; an empty cell is ``| |``)."""
    texts = [str(text).replace("|", "\\|") for text in cells]
    return "|" + "|".join(f" {text} " if text else " " for text in texts) + "|"


def markdown_table(header: Sequence[str], rows: Iterable[Iterable[Any]] = (), align: str | None = None) -> str:
    """A Markdown table: its header, the separator (``align``: one letter a column, ``l`` or ``r``; default all
    ``l``) and the rows (format numbers before, e.g. with ``cell``)."""
    separator = "|" + "".join("---:|" if side == "r" else "---|" for side in align or "l" * len(header))
    return "\n".join([markdown_row(header), separator, *(markdown_row(row) for row in rows)])


def print_table(header: Sequence[str], rows: Iterable[Iterable[Any]] = (), align: str | None = None) -> None:
    print(markdown_table(header, rows, align), flush=True)


# ----------------------------------------------------------------------------------------------------------- JSON


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the figures here (JSON)")


def write_json(path: Path | None, figures: Any) -> None:
    """Writes ``figures`` to ``path`` as indented JSON, NaN and infinities as null, which JSON has none of (nothing
    when ``path`` is None)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_json_values(figures), indent=2, allow_nan=False) + "\n")


def _json_values(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_values(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_values(item) for item in value]
    return value


# ----------------------------------------------------------------------------------------------------------- options


def require_at_least(parser: argparse.ArgumentParser, args: argparse.Namespace, minimum: int, *names: str) -> None:
    """Refuses (exit 2, ``--name must be >= minimum``) each of these options that is set and below ``minimum``."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value < minimum:
            parser.error(f"--{name.replace('_', '-')} must be >= {minimum}")


def option_words(args: argparse.Namespace, names: Iterable[str]) -> list[str]:
    """``--name value`` for each of these options that is set: to hand them on to a subprocess of the script."""
    words = []
    for name in names:
        if getattr(args, name) is not None:
            words += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    return words


def command_line(script: str, argv: Sequence[str]) -> str:
    """How the script was run, relative to the current folder: ``python scripts/<folder>/<name>.py ...``."""
    return " ".join(["python", os.path.relpath(script), *argv])


# ----------------------------------------------------------------------------------------------------------- runs


@contextmanager
def work_folder(keep: Path | None, prefix: str) -> Iterator[Path]:
    """Where a script's runs write: ``keep`` (``--keep``, created) or a temporary folder, removed afterwards."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
    else:
        with tempfile.TemporaryDirectory(prefix=prefix) as folder:
            yield Path(folder)


class RunFailed(RuntimeError):
    """A measured run failed; the message is its exit status and the last error line of its stderr."""


def run_processes(command: list[str], threads: int, processes: int, out: Path, **env: str) -> list[dict]:
    """Runs ``command`` (one measured run: a subprocess of the script, with ``OMP_NUM_THREADS=threads`` and ``env``)
    whose ``processes`` processes each print a result line (``lightfed.experiments.measurement.emit``); returns the
    results by rank. A run that exits with an error or misses a result line raises ``RunFailed`` (its whole stderr
    in ``out/stderr.txt``)."""
    from lightfed.experiments.measurement import result_lines

    out.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads), **env}
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    results = result_lines(done.stdout)
    if done.returncode != 0 or len(results) != processes:
        (out / "stderr.txt").write_text(done.stderr)
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()] or [""]
        reason = next((line for line in reversed(lines) if "Error" in line or "error:" in line), lines[-1])
        raise RunFailed(f"exit {done.returncode}: {reason[:300]}")
    return sorted(results, key=lambda result: result["rank"])
