"""scripts/checks/gpu_check.sh on a machine without a GPU: its dry run prints every check and parses every command line (and
says which does not), the real run refuses in one line, and (with stand-ins for Python and lightfed) it runs the
training runs a few at a time, then the rest in order, and prints one table."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "checks" / "gpu_check.sh"
FAMILIES = ["fedavg", "fedadam", "scaffold", "fedbuff", "dp-sgd", "fedecado", "trimmedmean"]
BENCHMARKS = [  # in the order they run: the vectorized figures first
    "benchmark.py",
    "tiny_clients_benchmark.py",
    "tiny clients under vmap",
    "compiled_step_benchmark.py",
    "client_evaluation_benchmark.py",
    "circuit_benchmark.py",
    "circuit_step_benchmark.py",
    "data_benchmark.py",
]
RUNS = 3 * len(FAMILIES) - 2 + 11  # DP-SGD in 32-true alone; deterministic twice, vectorized twice, Ditto twice, DP
# vectorized, bf16 vectorized, past the memory, pinned, CPU
CHECKS = RUNS + len(BENCHMARKS)  # command lines; the comparisons of runs have none


def gpu_check(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "PYTHON": sys.executable,
        "OMP_NUM_THREADS": "1",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_the_dry_run_lists_every_check_and_every_command_line_parses():
    result = gpu_check("--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for family in FAMILIES:
        for precision in ("32-true",) if family == "dp-sgd" else ("32-true", "16-mixed", "bf16-mixed"):
            (line,) = [line for line in lines if line.startswith(f"{family} {precision} ")]
            assert "--trainer.accelerator gpu" in line and f"--trainer.precision {precision}" in line
    assert not any(line.startswith("dp-sgd 16-mixed") for line in lines)  # DP refuses 16-bit precision
    assert any(line.startswith("clients vectorized") and "clients_in_parallel vectorized" in line for line in lines)
    assert any(line.startswith("fedecado pinned offload") and "state_device cpu" in line for line in lines)
    for compared in (
        "compare_weights vectorized fedavg-32-true",
        "compare_weights vectorized-again vectorized 0",
        "compare_weights ditto-vectorized ditto-one",
        "compare_weights dp-sgd-vectorized dp-sgd-32-true",
        "compare_weights pinned fedecado-32-true",
        "compare_weights vectorized-bf16 fedavg-bf16-mixed",
        "compare_weights cpu fedavg-32-true",
    ):
        assert any(compared in line for line in lines)
    for benchmark in BENCHMARKS:
        (line,) = [line for line in lines if line.startswith(benchmark)]
        assert "cuda" in line or "--accelerator gpu" in line
    assert lines[-1] == f"gpu_check: dry run: {CHECKS} of {CHECKS} command lines parse"


@pytest.mark.slow
def test_the_dry_run_names_every_command_line_that_does_not_parse():
    result = gpu_check("--dry-run", GPU_CHECK_ARGS="--trainer.no_such_option 1")
    assert result.returncode == 1
    refused = [line for line in result.stderr.splitlines() if "does not parse" in line]
    assert len(refused) == RUNS and all("no_such_option" in line for line in refused), result.stderr
    assert result.stdout.splitlines()[-1] == f"gpu_check: dry run: {len(BENCHMARKS)} of {CHECKS} command lines parse"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a GPU")
def test_without_a_gpu_the_run_refuses_in_one_line(tmp_path):
    result = gpu_check(GPU_CHECK_OUT=str(tmp_path / "out"))
    assert result.returncode == 2 and not (tmp_path / "out").exists()
    assert result.stderr == (
        "gpu_check: error: no CUDA device is visible to torch; run it on a machine with a GPU (or use --dry-run)\n"
    )


STAND_INS = {
    # python: claims a GPU, compares any two runs as equal, and a benchmark prints one line
    "python": """#!/usr/bin/env bash
case "$1" in
    -c) case "$2" in *get_device_name*) echo "Stand-in GPU" ;; esac ;;
    -) cat > /dev/null; echo "max |$3 - $4| = 0 (tolerance $5)" ;;
    *) echo "$(basename "$1") done" ;;
esac
""",
    # lightfed: notes when it starts and ends (the run's --trainer.name), and fails the fedadam 16-mixed run
    "lightfed": """#!/usr/bin/env bash
name=${@: -1}
for word in "$@"; do [ "${previous:-}" = --trainer.name ] && name=$word; previous=$word; done
echo "start $name $(date +%s%N)" >> "$RECORD"
sleep 2
echo "end $name $(date +%s%N)" >> "$RECORD"
[ "$name" = fedadam-16-mixed ] && exit 3
echo "test set, final global model (round 2): test_loss=1.0 test_acc=0.5; best val_acc 0.5 in round 2"
""",
}


@pytest.mark.slow
def test_the_runs_go_a_few_at_a_time_then_the_rest_in_order_and_one_table_names_each_result(tmp_path):
    for name, text in STAND_INS.items():
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    record = tmp_path / "record"
    result = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "PATH": os.pathsep.join([str(tmp_path), os.environ["PATH"]]),
            "PYTHON": "python",
            "GPU_CHECK_OUT": str(tmp_path / "out"),
            "GPU_CHECK_JOBS": "3",
            "RECORD": str(record),
        },
    )
    assert result.returncode == 1, result.stderr  # one row failed
    events = sorted((int(time), kind) for kind, _, time in (line.split() for line in record.read_text().splitlines()))
    running = [sum(1 if kind == "start" else -1 for _, kind in events[: k + 1]) for k in range(len(events))]
    assert len(events) == 2 * RUNS and max(running) == 3  # every run, three at a time, never more
    table = result.stdout.splitlines()
    assert table[1] == "Stand-in GPU" and table[2] == "| check | result | seconds | detail |"
    rows = [row.split(" | ") for row in table[4:-1]]
    assert len(rows) == CHECKS + 8  # and the eight comparisons
    assert [row[0] for row in rows[:3]] == ["| fedavg 32-true", "| fedavg 16-mixed", "| fedavg bf16-mixed"]
    failed = [row[0] for row in rows if row[1] != "ok"]
    assert failed == ["| fedadam 16-mixed"] and rows[4][1] == "FAIL (3)"
    assert rows[0][3] == "test set, final global model (round 2): test_loss=1.0 test_acc=0.5 |"
    assert [row[0] for row in rows[-len(BENCHMARKS) :]] == [f"| {name}" for name in BENCHMARKS]
    assert rows[-6][3] == "tiny_clients_benchmark.py done |"
    assert any(
        row[0] == "|   = the first vectorized run" and "max \\|vectorized-again - vectorized\\| = 0" in row[3]
        for row in rows
    )
    assert "gpu_check: fedadam 16-mixed: FAIL (3)" in result.stderr  # each check's line as it ends
