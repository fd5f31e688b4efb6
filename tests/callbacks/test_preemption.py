"""Ctrl-C, a SIGUSR1 that comes early and a SLURM requeue that fails: each ends a run cleanly, in one line."""

import json
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from lightfed.cli import run
from lightfed.experiments.execution import execute
from lightfed.experiments.plan import Run
from tests.conftest import LIGHTFED, trainer_options
from tests.session import run_in_session

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def fit(root: Path, devices: int, *extra: str) -> subprocess.CompletedProcess:
    """``lightfed fit`` of the quickstart (4 rounds); it ends without a traceback and leaves no process behind."""
    done = run_in_session(
        [
            *LIGHTFED,
            "fit",
            "--config",
            QUICKSTART,
            *trainer_options(
                rounds=4, client_eval_interval=0, devices=str(devices), root_dir=str(root), progress_bar="false"
            ),
            *extra,
        ]
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def signals_at_round_two(*signals: str, group: bool = False) -> str:
    spec = {
        "class_path": "tests.process_faults.SignalAtRound",
        "init_args": {"signals": list(signals), "round": 2, "group": group},
    }
    return f"--trainer.callbacks+={json.dumps(spec)}"


def checkpointed_round(root: Path) -> int:
    return torch.load(root / "quickstart" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)["round"]


@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.slow
def test_ctrl_c_stops_after_the_round_in_flight_checkpoints_it_and_ends_as_ctrl_c_does(tmp_path, devices):
    """Ctrl-C (SIGINT to every process, as a terminal sends it) while round 2 trains: round 2 is finished and
    checkpointed, one line says so, and the command ends by SIGINT (status 130 in a shell, which stops its loop)."""
    done = fit(tmp_path, devices, signals_at_round_two("SIGINT", group=True))
    assert done.returncode == -signal.SIGINT
    assert done.stderr.count("stopped on request after round 2;") == 1
    assert "resume with --ckpt_path last" in done.stderr
    assert checkpointed_round(tmp_path) == 2


def test_a_second_ctrl_c_stops_every_process_at_once_in_one_line(tmp_path):
    done = fit(tmp_path, 2, signals_at_round_two("SIGINT", "SIGINT", group=True))
    assert done.returncode == -signal.SIGINT
    # one line for each Ctrl-C: the first says the run stops after the round in flight, the second that it stopped
    acknowledged, line = [line for line in done.stderr.splitlines() if line.startswith("lightfed:")]
    assert "stopped on request" not in done.stderr
    assert acknowledged.startswith("lightfed: Ctrl-C: stopping after round 2, which is in flight")
    assert line.startswith("lightfed: stopped at once (Ctrl-C)")
    assert checkpointed_round(tmp_path) == 1  # round 2 was in flight


@pytest.mark.slow
def test_sigusr1_before_the_run_listens_is_honoured_once_it_does(tmp_path):
    """SIGUSR1 while the command builds the model (whose default action ends a process): the run trains its first
    round, checkpoints it and stops as a warned run does."""
    done = fit(tmp_path, 1, "--model", "tests.process_faults.SignalledWhileBuilt")
    assert done.returncode == 0, done.stderr
    assert "stopped on request after round 1;" in done.stderr
    assert checkpointed_round(tmp_path) == 1


def fake_scontrol(folder: Path, status: int, stderr: str) -> Path:
    """An ``scontrol`` that notes its arguments in ``folder/scontrol.args`` and exits with ``status``."""
    folder.mkdir()
    script = folder / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" > {folder / "scontrol.args"}\necho "{stderr}" >&2\nexit {status}\n')
    script.chmod(0o755)
    return folder


@pytest.mark.parametrize("scontrol", ["accepts", "refuses", "missing"])
def test_a_warned_slurm_job_says_whether_its_requeue_succeeded(tmp_path, monkeypatch, capsys, scontrol):
    """SIGUSR1 in round 2 of a SLURM job: the run stops after round 2 with its checkpoint; the job is said to be
    requeued only when scontrol accepted; otherwise one line gives scontrol's reason and how to resume."""
    refusal = "scontrol: error: Requeue of JobId=4242 not allowed: the job has --no-requeue"
    bin = {
        "accepts": lambda: fake_scontrol(tmp_path / "bin", 0, ""),
        "refuses": lambda: fake_scontrol(tmp_path / "bin", 1, refusal),
        "missing": lambda: tmp_path,
    }[scontrol]()
    root = tmp_path / "runs"
    err = warned_slurm_job(monkeypatch, capsys, bin, run, fit_argv(root))
    assert checkpointed_round(root) == 2
    assert "stopped on request after round 2;" in err and "requeueing SLURM job 4242" in err
    if scontrol == "accepts":
        assert "SLURM job 4242 requeued" in err and (bin / "scontrol.args").read_text().split() == ["requeue", "4242"]
        return
    assert "requeued" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("lightfed:")]
    reason = refusal if scontrol == "refuses" else "cannot run scontrol"
    assert line.startswith(f"lightfed: the requeue of SLURM job 4242 failed ({reason}")
    assert line.endswith("resume with --ckpt_path last")


def test_a_warned_run_of_a_sweep_says_that_it_requeues_its_job(tmp_path, monkeypatch, capsys):
    """A sweep keeps its runs' output from the terminal, but not the lines that the job stops and is requeued (which
    ends it before the sweep's own line)."""
    root = tmp_path / "runs"
    sweep_run = Run(QUICKSTART, "quickstart", {}, 0, "quickstart", fit_argv(root))
    bin = fake_scontrol(tmp_path / "bin", 0, "")
    err = warned_slurm_job(monkeypatch, capsys, bin, lambda _: execute(sweep_run, 0, 1, "val_acc", root), [])
    assert checkpointed_round(root) == 2
    assert "stopped on request after round 2;" in err and "SLURM job 4242 requeued" in err


def fit_argv(root: Path) -> list[str]:
    return [
        "fit",
        "--config",
        QUICKSTART,
        *trainer_options(rounds=4, client_eval_interval=0, root_dir=str(root), progress_bar="false"),
        signals_at_round_two("SIGUSR1"),
    ]


def warned_slurm_job(monkeypatch, capsys, bin: Path, start, argv: list[str]) -> str:
    """What ``start(argv)`` wrote on stderr as SLURM job 4242 with ``bin`` for its PATH, warned in round 2."""
    monkeypatch.setenv("PATH", str(bin))
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    start(argv)
    return capsys.readouterr().err
