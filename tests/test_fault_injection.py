"""A run killed with SIGKILL at random moments and resumed each time ends with the weights of an uninterrupted run."""

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import quickstart_command

ROOT = Path(__file__).resolve().parents[1]
KILLS = 4  # a start each: the moments differ by case (its own seeded draws), and each start costs about 15 s


def _command(root: Path, devices: int) -> list[str]:
    marker = "--trainer.callbacks+=tests.fault_marker.MarkTrainingStarted"
    return quickstart_command(root, devices, marker, "--ckpt_path", "auto", rounds=8, eval_interval=2)


def _environment(marker: Path) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "LIGHTFED_TEST_MARKER": str(marker)}


def _weights(root: Path) -> dict:
    """The run's last checkpoint (a start killed before its first checkpoint leaves an empty version folder, and the
    next start, finding nothing to resume, begins the run in a new one)."""
    checkpoints = sorted((root / "quickstart").glob("version_*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
    return torch.load(checkpoints[-1], weights_only=True)


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.slow
def test_sigkill_at_random_moments_and_resume_gives_the_uninterrupted_weights(tmp_path, devices):
    marker = tmp_path / "training"
    subprocess.run(
        _command(tmp_path / "full", devices),
        check=True,
        cwd=ROOT,
        capture_output=True,
        timeout=600,
        env=_environment(marker),
    )
    rng, kills, cuts = random.Random(devices), 0, [tmp_path / "cut_0"]
    while kills < KILLS:  # each start resumes (auto) from the last checkpoint it finds whole
        marker.unlink(missing_ok=True)
        run = subprocess.Popen(
            _command(cuts[-1], devices),
            cwd=ROOT,
            env=_environment(marker),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 600
        while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if run.poll() is not None:  # the run finished before it could be killed: kill a fresh run next
            assert run.returncode == 0
            cuts.append(tmp_path / f"cut_{len(cuts)}")
            continue
        time.sleep(rng.uniform(0.0, 1.5))  # somewhere in training, evaluation or a checkpoint write
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=600)
        kills += 1
    subprocess.run(
        _command(cuts[-1], devices), check=True, cwd=ROOT, capture_output=True, timeout=600, env=_environment(marker)
    )
    full = _weights(tmp_path / "full")
    assert full["round"] == 8
    for cut in map(_weights, cuts):
        assert cut["round"] == 8
        assert torch.equal(cut["params"], full["params"]) and torch.equal(cut["buffers"], full["buffers"])
