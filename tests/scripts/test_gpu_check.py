"""scripts/gpu_check.sh on a machine without a GPU: its dry run prints every check and parses every command line (and
says which does not), and the real run refuses in one line."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
FAMILIES = ["fedavg", "fedadam", "scaffold", "fedbuff", "dp-sgd", "fedecado", "trimmedmean"]
BENCHMARKS = ["benchmark.py", "circuit_benchmark.py", "circuit_step_benchmark.py", "data_benchmark.py"]
RUNS = 3 * len(FAMILIES) + 3  # and clients on streams, pinned offload, on the CPU
CHECKS = RUNS + len(BENCHMARKS)  # command lines; the 3 comparisons of runs have none


def gpu_check(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1",
                   "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]), **env}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=600)


def test_the_dry_run_lists_every_check_and_every_command_line_parses():
    result = gpu_check("--dry-run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for family in FAMILIES:
        for precision in ("32-true", "16-mixed", "bf16-mixed"):
            (line,) = [line for line in lines if line.startswith(f"{family} {precision} ")]
            assert "--trainer.accelerator gpu" in line and f"--trainer.precision {precision}" in line
    assert any(line.startswith("clients on 4 streams") and "--trainer.clients_in_parallel 4" in line for line in lines)
    assert any(line.startswith("fedecado pinned offload") and "state_device cpu" in line for line in lines)
    for compared in ("compare_weights streams fedavg-32-true", "compare_weights pinned fedecado-32-true",
                     "compare_weights cpu fedavg-32-true"):
        assert any(compared in line for line in lines)
    for benchmark in BENCHMARKS:
        (line,) = [line for line in lines if line.startswith(benchmark)]
        assert "cuda" in line or "--accelerator gpu" in line
    assert lines[-1] == f"gpu_check: dry run: {CHECKS} of {CHECKS} command lines parse"


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
    assert result.stderr == ("gpu_check: error: no CUDA device is visible to torch; run it on a machine with a GPU (or "
                             "use --dry-run)\n")
