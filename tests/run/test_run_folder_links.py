"""A symbolic link planted in a run folder (on a shared scratch space, pointing at another user's file) is never
written through: a resume refuses the folder in one line, or proceeds without touching the file the link points to."""

import json
import os
from pathlib import Path

import pytest
import torch

from lightfed.cli import main, run
from lightfed.core.checkpoint_files import write_file
from lightfed.core.folder_lock import FolderLock
from lightfed.run.run_folder import write_run_config
from tests.test_run_identity import TINY

PRECIOUS = b"another user's file\n"


@pytest.fixture
def run_folder(tmp_path) -> tuple[list[str], Path, Path]:
    """A 2-round run's resume arguments (to 3 rounds), its folder, and a file of another user's beside it."""
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    tiny = ["--config", str(config), "--trainer.root_dir", str(tmp_path / "runs")]
    run(["fit", *tiny])
    target = tmp_path / "others" / "precious"
    target.parent.mkdir()
    target.write_bytes(PRECIOUS)
    return [*tiny, "--ckpt_path", "last", "--trainer.rounds", "3"], tmp_path / "runs" / "tiny" / "version_0", target


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("name", [".lock", "metrics.jsonl"])
def test_a_link_in_place_of_a_file_the_run_appends_to_is_refused_in_one_line(run_folder, capsys, name):
    resume, folder, target = run_folder
    link = folder / name
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    before = _files(folder)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        main(["fit", *resume])
    assert exit.value.code == 2
    assert capsys.readouterr().err == (
        f"lightfed: error: the run folder {folder} holds a symbolic link {name}, where the run writes its own file: "
        "remove the link, then resume with --ckpt_path last\n"
    )
    assert target.read_bytes() == PRECIOUS
    assert _files(folder) == before and link.is_symlink()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["config.yaml.tmp", "checkpoints/last.tmp"])
def test_a_link_in_place_of_a_temporary_file_is_removed_not_written_through(run_folder, name):
    resume, folder, target = run_folder
    (folder / name).symlink_to(target)
    run(["fit", *resume])
    assert target.read_bytes() == PRECIOUS
    assert not (folder / name).exists() and not (folder / name).is_symlink()
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines if "final" not in line] == [1, 2, 3]


def _link_to_precious(path: Path, tmp_path: Path) -> Path:
    target = tmp_path / "precious"
    target.write_bytes(PRECIOUS)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return target


def test_the_lock_is_never_taken_through_a_link(tmp_path):
    target = _link_to_precious(tmp_path / "run" / ".lock", tmp_path)
    with pytest.raises(OSError):
        FolderLock(tmp_path / "run").acquire()
    assert target.read_bytes() == PRECIOUS


def test_the_lock_is_never_made_through_a_link_at_its_new_name(tmp_path):
    target = _link_to_precious(tmp_path / "run" / f".lock.{os.getpid()}.new", tmp_path)
    lock = FolderLock(tmp_path / "run")
    assert lock.acquire()
    assert target.read_bytes() == PRECIOUS and (tmp_path / "run" / ".lock").read_text() == f"{os.getpid()}\n"
    lock.release()


def test_a_checkpoint_and_a_config_are_never_written_through_a_linked_temporary_file(tmp_path):
    checkpoint_target = _link_to_precious(tmp_path / "run" / "checkpoints" / "last.tmp", tmp_path)
    write_file(tmp_path / "run" / "checkpoints" / "last.ckpt", {"round": torch.tensor(1)})
    assert checkpoint_target.read_bytes() == PRECIOUS
    (tmp_path / "run" / "config.yaml.tmp").symlink_to(checkpoint_target)
    write_run_config(tmp_path / "run", "trainer: {rounds: 2}\n")
    assert checkpoint_target.read_bytes() == PRECIOUS
    assert (tmp_path / "run" / "config.yaml").read_text() == "trainer:\n  rounds: 2\n"
