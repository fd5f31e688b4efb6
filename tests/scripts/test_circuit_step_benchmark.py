"""scripts/benchmarks/circuit_step_benchmark.py: a tiny run prints the FedAvg reference, both norms' trial steps and both circuit
strategies' server steps."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cells_of(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


@pytest.mark.slow
def test_prints_one_row_per_work_with_ratios_to_the_fedavg_aggregate():
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "benchmarks" / "circuit_step_benchmark.py"),
            "--clients",
            "3",
            "--size",
            "100000",
            "--repeats",
            "2",
            "--device",
            "cpu",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    heading, table, steps = out.strip().split("\n\n")
    assert heading.startswith("a = 3 clients, d = 100,000 coordinates")
    assert table.splitlines()[:2] == ["| work | median ms | x FedAvg |", "|---|---:|---:|"]
    rows = {name: cells for name, *cells in (cells_of(line) for line in table.splitlines()[2:])}
    assert list(rows) == [
        "FedAvg aggregate (x + mean of the deltas)",
        "BE trial step, max norm",
        "BE trial step, rms norm",
        "FedECADO server step",
        "Adaptive FedECADO server step",
    ]
    assert [line.split(":")[0] for line in steps.splitlines()] == [
        "FedECADO server step",
        "Adaptive FedECADO server step",
    ]
    assert all(int(line.split(": ")[1].split()[0]) >= 1 for line in steps.splitlines())
    reference = float(rows["FedAvg aggregate (x + mean of the deltas)"][0])
    for milliseconds, ratio in rows.values():
        assert (
            float(milliseconds) > 0
            and abs(float(ratio) - float(milliseconds) / reference) <= 0.05 * float(ratio) + 0.05
        )
