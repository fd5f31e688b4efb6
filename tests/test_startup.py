"""Start-up: what a run imports and how its processes begin (timings: scripts/benchmarks/startup_benchmark.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LIGHTFED, trainer_options

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
OPTIONAL = ["opacus", "sklearn", "tensorboard", "torch.utils.tensorboard"]  # imported by the runs that use them


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return set(done.stdout.split())


@pytest.mark.slow
def test_import_lightfed_and_parsing_the_quickstart_leave_optional_packages_unimported():
    modules = _modules_after(
        "import lightfed\nfrom lightfed.cli import build_parser\n"
        f"build_parser()[0].parse_args(['fit', '--config', {QUICKSTART!r}])"
    )
    assert "lightfed.cli" in modules and "lightfed.trainer" in modules
    assert not [name for name in OPTIONAL if name in modules]


@pytest.mark.slow
def test_the_privacy_accountant_imports_opacus_where_it_is_used():
    modules = _modules_after(
        "from lightfed.privacy.accountant import load_accountant, spent_epsilon\n"
        "spent_epsilon(load_accountant('rdp', None), 1e-5)"
    )
    assert "opacus" in modules


def _fit_on_two_processes(tmp_path: Path, callback: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            *LIGHTFED,
            "fit",
            "--config",
            QUICKSTART,
            *trainer_options(rounds=1, devices=2, root_dir=str(tmp_path / "runs"), progress_bar="false"),
            f"--trainer.callbacks+=tests.process_probe.{callback}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "LIGHTFED_TEST_PROBE": str(tmp_path)},
    )


@pytest.mark.slow
def test_the_second_process_of_a_cpu_run_is_a_fork_of_the_command(tmp_path):
    """No second interpreter that imports and parses everything again: process 1 is forked after the parse."""
    assert _fit_on_two_processes(tmp_path, "RecordProcess").returncode == 0
    first, second = (json.loads((tmp_path / f"rank_{rank}.json").read_text()) for rank in range(2))
    assert not first["forked"] and second["forked"]
    assert second["parent"] == first["pid"]


@pytest.mark.slow
def test_a_failing_second_process_fails_the_command(tmp_path):
    done = _fit_on_two_processes(tmp_path, "FailOnSecondProcess")
    assert done.returncode != 0
    assert "RuntimeError: process 1 fails" in done.stderr
