"""Checkpoints as the commands meet them: a malicious file (one that would create a file when unpickled) passed by
name, planted as last.ckpt or as a per-process file runs nothing and ends in one line with exit code 2 (or gives way
to previous.ckpt with one warning); a flipped bit in the weights is caught; a full disk stops the run in one line
with its checkpoints intact."""

import errno
import os
import shutil
from pathlib import Path

import pytest
import torch

from lightfed.cli import main, run
from lightfed.core.checkpoint_files import file_checksum
from lightfed.run.checkpoint import load_checkpoint, save_checkpoint
from lightfed.run.run_output import RunOutput
from tests.conftest import trainer_options

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "configs" / "digits"
SCAFFOLD = ["--config", str(DIGITS / "base.yaml"), "--config", str(DIGITS / "scaffold.yaml")]  # per-process files
TINY = [
    *trainer_options(
        clients_per_round=4,
        local_epochs="null",
        local_steps=3,
        client_eval_interval=0,
        progress_bar="false",
        name="run",
    ),
]


class Payload:
    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return os.system, (f"touch {self.target}",)


def _command(command: str, root: Path, *options: str) -> list[str]:
    return [command, *SCAFFOLD, *TINY, "--trainer.root_dir", str(root), *options]


def _fit(root: Path, rounds: int, *options: str) -> None:
    run(_command("fit", root, "--trainer.rounds", str(rounds), *options))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """``cut``: a run of 2 rounds (last.ckpt at round 2, previous.ckpt at round 1, each with its process file);
    ``full``: the same run for 3 rounds."""
    runs = tmp_path_factory.mktemp("runs")
    _fit(runs / "cut", 2)
    _fit(runs / "full", 3)
    return runs


@pytest.fixture
def cut(runs, tmp_path) -> Path:
    """A copy of the 2-round run's root folder."""
    shutil.copytree(runs / "cut", tmp_path / "root")
    return tmp_path / "root"


def _checkpoints(root: Path) -> Path:
    return root / "run" / "version_0" / "checkpoints"


def _files(root: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}


def _one_line_and_exit_2(argv: list[str], capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lightfed: error: "), err
    return err


@pytest.mark.parametrize("command", ["fit", "test", "validate"])
def test_a_malicious_checkpoint_passed_by_name_runs_nothing(tmp_path, capsys, command):
    evil, target = tmp_path / "shared.ckpt", tmp_path / "created"
    torch.save({"round": 1, "params": Payload(target)}, evil)
    err = _one_line_and_exit_2(_command(command, tmp_path / "runs", "--ckpt_path", str(evil)), capsys)
    assert f"checkpoint {evil} cannot be read (refused without running it: it would call posix.system" in err
    assert not target.exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["fit", "test", "validate"])
def test_a_malicious_last_checkpoint_without_a_previous_one_runs_nothing(cut, capsys, command):
    (_checkpoints(cut) / "previous.ckpt").unlink()
    target = cut / "created"
    torch.save({"round": 1, "params": Payload(target)}, _checkpoints(cut) / "last.ckpt")
    before = _files(cut)
    err = _one_line_and_exit_2(_command(command, cut, "--ckpt_path", "last", "--trainer.rounds", "3"), capsys)
    assert "last.ckpt cannot be read (refused without running it" in err
    assert not target.exists() and _files(cut) == before


def test_a_malicious_last_checkpoint_gives_way_to_the_previous_one(cut, runs, capsys):
    target = cut / "created"
    torch.save({"round": 1, "params": Payload(target)}, _checkpoints(cut) / "last.ckpt")
    capsys.readouterr()
    _fit(cut, 3, "--ckpt_path", "last")
    warnings = [line for line in capsys.readouterr().out.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "refused without running it" in warnings[0] and not target.exists()
    resumed, full = (load_checkpoint(_checkpoints(root) / "last.ckpt") for root in (cut, runs / "full"))
    assert resumed["round"] == 3 and torch.equal(resumed["params"], full["params"])


@pytest.mark.parametrize("checksum", ["kept", "rewritten"])
def test_a_malicious_process_file_runs_nothing(cut, capsys, checksum):
    """Planted alone, its checksum no longer matches; planted with the checkpoint's checksums rewritten to match, it
    is refused by weights_only loading."""
    folder = _checkpoints(cut)
    (folder / "previous.ckpt").unlink()
    process_file, target = folder / "process_states" / "round_2" / "process_0_of_1.pt", cut / "created"
    torch.save({"clients": Payload(target)}, process_file)
    if checksum == "rewritten":
        state = load_checkpoint(folder / "last.ckpt", process_files=False)
        state["process_states"]["sha256"] = [file_checksum(process_file)]
        save_checkpoint(folder / "last.ckpt", state)
        (folder / "previous.ckpt").unlink()
    before = _files(cut)
    err = _one_line_and_exit_2(_command("fit", cut, "--ckpt_path", "last", "--trainer.rounds", "3"), capsys)
    reason = "does not match its checksum" if checksum == "kept" else "refused without running it: it would call posix"
    assert f"process state file {process_file}" in err and reason in err
    assert not target.exists() and _files(cut) == before


def test_a_flipped_bit_in_the_weights_gives_way_to_the_previous_checkpoint(cut, runs, capsys):
    last = _checkpoints(cut) / "last.ckpt"
    params = torch.load(last, weights_only=True)["params"]
    data = bytearray(last.read_bytes())
    data[bytes(data).index(params.numpy().tobytes()) + 4 * 100] ^= 1  # the lowest mantissa bit of parameter 100
    last.write_bytes(bytes(data))
    capsys.readouterr()
    _fit(cut, 3, "--ckpt_path", "last")
    warnings = [line for line in capsys.readouterr().out.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "its checksum does not match" in warnings[0]
    resumed, full = (load_checkpoint(_checkpoints(root) / "last.ckpt") for root in (cut, runs / "full"))
    assert torch.equal(resumed["params"], full["params"])


def test_a_full_disk_stops_the_run_in_one_line_with_its_checkpoints_intact(cut, runs, capsys, monkeypatch):
    real_save = torch.save

    def full_disk(obj, file, *args, **kwargs) -> None:
        file.write(b"\0" * 100)
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:  # as torch reports it
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 8832 vs 8726")  # noqa: B904 (torch chains it implicitly)

    checkpoints = {path: data for path, data in _files(cut).items() if path.suffix in (".ckpt", ".pt")}
    monkeypatch.setattr(torch, "save", full_disk)
    err = _one_line_and_exit_2(_command("fit", cut, "--ckpt_path", "last", "--trainer.rounds", "3"), capsys)
    assert err.startswith(f"lightfed: error: cannot write checkpoint {_checkpoints(cut)}")
    assert err.endswith(": No space left on device; free space and resume with --ckpt_path last\n")
    assert not list(cut.rglob("*.tmp"))
    assert '"round": 3' not in next(cut.rglob("metrics.jsonl")).read_text()  # the round whose checkpoint failed
    assert {path: data for path, data in _files(cut).items() if path.suffix in (".ckpt", ".pt")} == checkpoints
    monkeypatch.setattr(torch, "save", real_save)  # space freed: the run resumes to the uninterrupted weights
    _fit(cut, 3, "--ckpt_path", "last")
    resumed, full = (load_checkpoint(_checkpoints(root) / "last.ckpt") for root in (cut, runs / "full"))
    assert torch.equal(resumed["params"], full["params"])


def test_a_run_folder_turned_read_only_mid_run_stops_the_run_in_one_line(cut, capsys, monkeypatch):
    def read_only(self, line) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self.metrics_file))

    monkeypatch.setattr(RunOutput, "append", read_only)
    err = _one_line_and_exit_2(_command("fit", cut, "--ckpt_path", "last", "--trainer.rounds", "3"), capsys)
    metrics = _checkpoints(cut).parent / "metrics.jsonl"
    assert (
        err == f"lightfed: error: cannot write file {metrics}: Read-only file system; make {metrics.parent} "
        "writable and resume with --ckpt_path last\n"
    )
