"""A process of a run that freezes or dies: the others stop within trainer.collective_timeout, with one line that
names the process, how it was lost and where the run's last checkpoint is."""

import json
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lightfed.errors import ConfigError
from lightfed.run.lost_process import collective_failed, lost_process_line
from tests.conftest import quickstart_command, small_trainer
from tests.session import run_in_session

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 10  # short, yet longer than any healthy wait of this tiny run on a loaded machine


def fit_two_processes(root: Path, *extra: str) -> subprocess.CompletedProcess:
    """``lightfed fit`` of the quickstart (4 rounds) on 2 CPU processes, with a short collective timeout."""
    return run_in_session(quickstart_command(root, 2, *extra, rounds=4, collective_timeout=TIMEOUT_S))


def signal_at_round_three(signals: list[str], rank: int) -> str:
    spec = {
        "class_path": "tests.process_faults.SignalAtRound",
        "init_args": {"signals": signals, "round": 3, "rank": rank},
    }
    return f"--trainer.callbacks+={json.dumps(spec)}"


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("lightfed: error:")]


def last_checkpoint(root: Path) -> Path:
    return root / "quickstart" / "version_0" / "checkpoints" / "last.ckpt"


@pytest.mark.slow
def test_a_frozen_process_stops_the_run_after_the_collective_timeout_with_one_line_naming_it(tmp_path):
    """Process 1 stops itself (SIGSTOP) as round 3 begins: process 0 waits in round 3's reduction for
    collective_timeout seconds, says so in one line and ends the frozen process; round 2's checkpoint is whole."""
    done = fit_two_processes(tmp_path, signal_at_round_three(["SIGSTOP"], rank=1))
    (line,) = error_lines(done.stderr)
    assert done.returncode == 2
    assert f"process 1 of 2 was stopped (SIGSTOP) and did not answer for {TIMEOUT_S} s" in line
    assert "in the reduction of round 3" in line and "trainer.collective_timeout" in line
    assert f"{last_checkpoint(tmp_path)} holds the run's last checkpoint: resume with --ckpt_path last" in line
    assert torch.load(last_checkpoint(tmp_path), weights_only=False)["round"] == 2


@pytest.mark.slow
def test_a_killed_process_is_named_with_its_signal_by_the_process_that_started_it(tmp_path):
    done = fit_two_processes(tmp_path, signal_at_round_three(["SIGKILL"], rank=1))
    (line,) = error_lines(done.stderr)
    assert done.returncode == 2
    assert "process 1 of 2 died (killed by SIGKILL) in the reduction of round 3" in line
    assert str(last_checkpoint(tmp_path)) in line


@pytest.mark.slow
def test_when_the_first_process_dies_the_second_names_it(tmp_path):
    done = fit_two_processes(tmp_path, signal_at_round_three(["SIGKILL"], rank=0))
    (line,) = error_lines(done.stderr)
    assert done.returncode == -signal.SIGKILL  # the command's own process; process 1 said what happened
    assert "process 0 of 2 died in the reduction of round 3" in line


@pytest.mark.slow
def test_a_process_that_dies_while_the_first_is_busy_is_named_without_waiting_for_a_collective(tmp_path):
    """Process 1 is killed as round 3 begins while process 0 is busy for 120 s outside any collective: process 0's
    waiter for its fork says which process died and ends the command after its grace (5 s), not 120 s later."""
    busy = {"class_path": "tests.process_faults.BusyAtRound", "init_args": {"seconds": 120, "round": 3}}
    busy = f"--trainer.callbacks+={json.dumps(busy)}"
    done = fit_two_processes(tmp_path, signal_at_round_three(["SIGKILL"], rank=1), busy)
    (line,) = error_lines(done.stderr)
    assert done.returncode == -signal.SIGKILL
    assert line == (
        "lightfed: error: process 1 of 2 died (killed by SIGKILL); the run stops: resume it from its last "
        "checkpoint with --ckpt_path last"
    )


def test_the_collective_timeout_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="trainer.collective_timeout must be from 1 to"):
        small_trainer(tmp_path, collective_timeout=0)


def _raised_in(filename: str, message: str) -> RuntimeError:
    """A RuntimeError whose innermost frame is in ``filename``, as gloo's errors come out of torch.distributed."""
    try:
        exec(compile(f"raise RuntimeError({message!r})", filename, "exec"))
    except RuntimeError as error:
        return error


def test_a_process_no_one_can_name_is_said_with_gloo_s_own_words():
    """A cluster's launcher started the 4 processes (no forks to ask): the line says what gloo knows."""
    gloo = (
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer [10.0.0.2]:49378. "
        "This is typically caused by a remote worker crashing."
    )
    error = _raised_in("/venv/lib/torch/distributed/distributed_c10d.py", gloo)
    trainer = SimpleNamespace(
        fabric=SimpleNamespace(world_size=4, global_rank=2), collective_timeout=1800.0, log_dir=None, round=3
    )
    assert collective_failed(error) and not collective_failed(_raised_in("/work/model.py", gloo))
    assert lost_process_line(error, trainer, True, None) == (
        "one of the 4 processes closed its connection (it failed or died: Connection closed by peer "
        "[10.0.0.2]:49378) after round 3; no checkpoint was written: start the run again"
    )
