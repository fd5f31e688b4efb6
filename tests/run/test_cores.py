"""available_cores: the affinity mask where the platform has one, within a cgroup's CPU quota; share_cores: a CPU
run's processes each train on their share of them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightfed.run import cores
from lightfed.run.cores import available_cores
from tests.conftest import QUICKSTART, trainer_options

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_quota(monkeypatch, tmp_path):
    monkeypatch.setattr(cores, "CPU_QUOTA", tmp_path / "no-cpu.max")


def test_the_affinity_mask_where_there_is_one(no_quota):
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity mask on this platform")
    assert available_cores() == len(os.sched_getaffinity(0)) >= 1


def test_all_cores_where_there_is_no_mask(monkeypatch, no_quota):
    monkeypatch.delattr(cores.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(cores.os, "cpu_count", lambda: 7)
    assert available_cores() == 7
    monkeypatch.setattr(cores.os, "cpu_count", lambda: None)
    assert available_cores() == 1


@pytest.mark.parametrize(("quota", "expected"), [("150000 100000", 2), ("max 100000", 8), ("50000 100000", 1)])
def test_a_cgroup_cpu_quota_caps_the_cores(monkeypatch, tmp_path, quota, expected):
    """A container given 1.5 CPUs of an 8-core mask may run on 2 cores' worth at once; "max" is no quota."""
    (tmp_path / "cpu.max").write_text(f"{quota}\n")
    monkeypatch.setattr(cores, "CPU_QUOTA", tmp_path / "cpu.max")
    monkeypatch.setattr(cores.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert available_cores() == expected


FAKED_CORES = 4  # more than the test machine's, so the share is the run's doing, not torch's default
PROBE = (
    f"import lightfed.run.cores as cores; cores.available_cores = lambda: {FAKED_CORES}; "
    "from lightfed.cli import main; main()"
)


@pytest.mark.slow
@pytest.mark.parametrize(("devices", "omp", "threads"), [(1, None, 4), (2, None, 2), (2, "1", 1)])
def test_each_process_of_a_cpu_run_trains_on_its_share_of_the_cores(tmp_path, devices, omp, threads):
    """The command gives each of its processes the available cores // processes as torch's threads, unless the
    user set OMP_NUM_THREADS, which every process keeps."""
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    env.update(
        {"PYTHONPATH": str(ROOT), "LIGHTFED_TEST_PROBE": str(tmp_path)}, **({"OMP_NUM_THREADS": omp} if omp else {})
    )
    settings = dict(rounds=1, devices=devices, clients_per_round=2, local_epochs=1, progress_bar="false")
    command = [sys.executable, "-c", PROBE, "fit", "--config", str(QUICKSTART), *trainer_options(**settings)]
    command += [
        "--trainer.root_dir",
        str(tmp_path / "runs"),
        "--trainer.callbacks+=tests.run.thread_probe.RecordThreads",
    ]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    records = [json.loads((tmp_path / f"rank_{rank}.json").read_text()) for rank in range(devices)]
    assert records == [{"threads": threads, "omp": str(threads)}] * devices
