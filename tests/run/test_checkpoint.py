"""Checkpoint files: loaded without running code, verified by checksums, a damaged last.ckpt replaced by the
previous one, and a failed write (a full disk) leaves the checkpoints as they were and no temporary file."""

import errno
import io
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from lightfed.core.process_states import FOLDER, file_name, reader, write_process_state
from lightfed.errors import CheckpointWriteError, ConfigError
from lightfed.run.checkpoint import (
    LAST,
    PREVIOUS,
    load_checkpoint,
    resolve_checkpoint,
    restore_rng_states,
    rng_states,
    save_checkpoint,
)


class Payload:
    """Unpickling it would create the file ``target``."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return os.system, (f"touch {self.target}",)


class ExecPayload(Payload):
    def __reduce__(self):
        return exec, (f"open({str(self.target)!r}, 'w').close()",)


def _state(round: int, size: int = 1000) -> dict:
    """What the trainer writes, in small."""
    generator = torch.Generator().manual_seed(round)
    return {
        "round": round,
        "params": torch.randn(size, generator=generator),
        "buffers": torch.arange(3, dtype=torch.int64),
        "strategy": {"m": torch.randn(size, generator=generator), "step": round},
        "process_states": None,
        "rng": rng_states(),
        "metrics": {"val_acc": 0.5 + round / 100},
    }


def _two_checkpoints(folder: Path) -> Path:
    """``last.ckpt`` of round 2 with ``previous.ckpt`` of round 1 beside it."""
    last = folder / LAST
    save_checkpoint(last, _state(1))
    save_checkpoint(last, _state(2))
    return last


def _warnings_and_round(last: Path) -> tuple[list[str], int]:
    warnings = []
    return warnings, load_checkpoint(last, warnings.append)["round"]


def test_a_checkpoint_holds_only_what_weights_only_loading_accepts(tmp_path):
    save_checkpoint(tmp_path / LAST, _state(1))
    loaded = torch.load(tmp_path / LAST, weights_only=True)
    assert loaded["round"] == 1 and torch.equal(loaded["params"], _state(1)["params"])


def test_the_rng_states_are_restored_exactly(tmp_path):
    torch.manual_seed(3), np.random.seed(4), random.seed(5)
    np.random.standard_normal()  # numpy now holds a cached Gaussian, part of its state
    save_checkpoint(tmp_path / LAST, {"rng": rng_states()})
    expected = torch.rand(4), np.random.standard_normal(5), random.random()
    restore_rng_states(load_checkpoint(tmp_path / LAST)["rng"])
    drawn = torch.rand(4), np.random.standard_normal(5), random.random()
    assert torch.equal(drawn[0], expected[0]) and np.array_equal(drawn[1], expected[1]) and drawn[2] == expected[2]


def test_a_value_weights_only_loading_would_refuse_is_not_written(tmp_path):
    with pytest.raises(TypeError, match="strategy/lr is a numpy.float64"):
        save_checkpoint(tmp_path / LAST, {**_state(1), "strategy": {"lr": np.float64(0.1)}})
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("payload", [Payload, ExecPayload])
@pytest.mark.parametrize(
    "write",
    [torch.save, lambda obj, path: path.write_bytes(__import__("pickle").dumps(obj))],
    ids=["torch_save", "plain_pickle"],
)
def test_a_malicious_last_checkpoint_runs_nothing_and_the_previous_one_is_used(tmp_path, payload, write):
    last, target = _two_checkpoints(tmp_path), tmp_path / "created"
    write({"round": 9, "params": payload(target)}, last)
    warnings, round = _warnings_and_round(last)
    assert round == 1 and not target.exists()
    assert len(warnings) == 1 and "refused without running it" in warnings[0] and "previous.ckpt" in warnings[0]
    (tmp_path / PREVIOUS).unlink()
    with pytest.raises(ConfigError, match="refused without running it") as error:
        load_checkpoint(last)
    assert "\n" not in str(error.value) and not target.exists()


def test_a_malicious_file_passed_by_name_is_refused_in_one_line(tmp_path):
    _two_checkpoints(tmp_path)  # a previous.ckpt beside it is no fallback for a file named by the user
    evil, target = tmp_path / "shared.ckpt", tmp_path / "created"
    torch.save({"params": Payload(target)}, evil)
    with pytest.raises(ConfigError) as error:
        load_checkpoint(evil)
    message = str(error.value)
    assert message.startswith(
        f"checkpoint {evil} cannot be read (refused without running it: it would call posix.system"
    )
    assert "\n" not in message and not target.exists()


def _flip_one_bit_of_the_params(last: Path) -> None:
    params = torch.load(last, weights_only=True)["params"]
    data = bytearray(last.read_bytes())
    at = bytes(data).index(params.numpy().tobytes()) + 4 * 500 + 1  # the stored tensor's bytes, element 500
    data[at] ^= 0b100
    last.write_bytes(bytes(data))
    assert not torch.equal(torch.load(last, weights_only=True)["params"], params)  # the flip reached the weights


@pytest.mark.parametrize(
    "damage", ["truncated_30k", "truncated_1k", "wrong_structure", "not_a_dict", "flipped_bit", "empty"]
)
def test_a_damaged_last_checkpoint_falls_back_to_the_previous_one_with_one_warning(tmp_path, damage):
    last = tmp_path / LAST
    save_checkpoint(last, _state(1, size=100_000))
    save_checkpoint(last, _state(2, size=100_000))
    if damage.startswith("truncated"):
        last.write_bytes(last.read_bytes()[: int(damage.split("_")[1][:-1]) * 1000])  # 30 KB: OSError [Errno 22]
    elif damage == "wrong_structure":
        torch.save({"weights": torch.zeros(3)}, last)
    elif damage == "not_a_dict":
        torch.save([1, 2, 3], last)
    elif damage == "flipped_bit":
        _flip_one_bit_of_the_params(last)
    else:
        last.write_bytes(b"")
    warnings, round = _warnings_and_round(last)
    assert round == 1
    assert len(warnings) == 1 and warnings[0].startswith(f"lightfed: warning: checkpoint {last} cannot be read (")
    (tmp_path / PREVIOUS).unlink()
    with pytest.raises(
        ConfigError, match=f"^checkpoint {last} cannot be read .*; resume from another checkpoint"
    ) as error:
        load_checkpoint(last)
    assert "\n" not in str(error.value)


def test_a_flipped_bit_is_named_as_a_checksum_mismatch(tmp_path):
    last = tmp_path / LAST
    save_checkpoint(last, _state(1))
    _flip_one_bit_of_the_params(last)
    with pytest.raises(ConfigError, match="its checksum does not match"):
        load_checkpoint(last)


def test_a_damaged_previous_checkpoint_is_an_error_after_the_warning(tmp_path):
    last = _two_checkpoints(tmp_path)
    last.write_bytes(b"garbage")
    (tmp_path / PREVIOUS).unlink()
    (tmp_path / PREVIOUS).write_bytes(b"garbage too")
    warnings = []
    with pytest.raises(ConfigError, match=f"^checkpoint {tmp_path / PREVIOUS} cannot be read"):
        load_checkpoint(last, warnings.append)
    assert len(warnings) == 1


# ----------------------------------------------------------------- per-process files


def _with_process_files(folder: Path, world: int = 2) -> Path:
    """``last.ckpt`` (round 2) whose process files hold each rank's clients; ``previous.ckpt`` (round 1) too."""
    last = folder / LAST
    for round in (1, 2):
        files = folder / FOLDER / f"round_{round}"
        digests = [
            write_process_state(files, rank, world, {"clients": {rank: {"c": torch.full((3,), float(round))}}})
            for rank in range(world)
        ]
        save_checkpoint(
            last,
            {**_state(round), "process_states": {"folder": f"round_{round}", "world_size": world, "sha256": digests}},
        )
    return last


def test_the_process_files_are_verified_with_their_checkpoint(tmp_path):
    last = _with_process_files(tmp_path)
    checkpoint = load_checkpoint(last)
    read = reader(tmp_path / FOLDER / checkpoint["process_states"]["folder"], 2)
    assert torch.equal(read(1)["clients"][1]["c"], torch.full((3,), 2.0))


@pytest.mark.parametrize("damage", ["missing", "flipped_bit", "malicious"])
def test_a_damaged_process_file_falls_back_to_the_previous_checkpoint(tmp_path, damage):
    last, target = _with_process_files(tmp_path), tmp_path / "created"
    process_file = tmp_path / FOLDER / "round_2" / file_name(1, 2)
    if damage == "missing":
        process_file.unlink()
    elif damage == "flipped_bit":
        data = bytearray(process_file.read_bytes())
        data[len(data) // 2] ^= 1
        process_file.write_bytes(bytes(data))
    else:
        torch.save({"clients": Payload(target)}, process_file)
    warnings, round = _warnings_and_round(last)
    assert round == 1 and not target.exists()
    assert len(warnings) == 1 and f"process state file {process_file}" in warnings[0]
    (tmp_path / PREVIOUS).unlink()
    with pytest.raises(ConfigError, match=f"^checkpoint {last} cannot be read .*process state file"):
        load_checkpoint(last)


def test_a_malicious_process_file_with_a_matching_checksum_is_refused_when_read(tmp_path):
    """Whoever rewrites the checksums too gets no further: the file is read with weights_only."""
    folder, target = tmp_path / "round_1", tmp_path / "created"
    folder.mkdir()
    torch.save({"clients": Payload(target)}, folder / file_name(0, 1))
    with pytest.raises(ConfigError) as error:
        reader(folder, 1)(0)
    message = str(error.value)
    assert message.startswith(
        f"process state file {folder / file_name(0, 1)} cannot be read (refused without running it"
    )
    assert "\n" not in message and not target.exists()


# ----------------------------------------------------------------- a full disk


def _full_disk_after(written: int, as_torch_reports_it: bool):
    """A ``torch.save`` that writes ``written`` bytes of the file and then finds the disk full: an OSError, or the
    RuntimeError torch raises with the OSError as its context."""
    real_save = torch.save

    def save(obj, file, *args, **kwargs) -> None:
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        if isinstance(file, (str, Path)):
            Path(file).write_bytes(buffer.getvalue()[:written])
        else:
            file.write(buffer.getvalue()[:written])
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            if as_torch_reports_it:
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 8832 vs 8726")  # noqa: B904 (torch chains it implicitly)
            raise

    return save


@pytest.mark.parametrize("as_torch_reports_it", [False, True], ids=["oserror", "runtimeerror"])
def test_a_full_disk_leaves_the_checkpoints_as_they_were_and_no_temporary_file(
    tmp_path, monkeypatch, as_torch_reports_it
):
    last = _with_process_files(tmp_path)
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    monkeypatch.setattr(torch, "save", _full_disk_after(500, as_torch_reports_it))
    with pytest.raises(CheckpointWriteError) as error:
        save_checkpoint(last, _state(3))
    assert str(error.value) == (
        f"cannot write checkpoint {last}: No space left on device; free space and resume with --ckpt_path last"
    )
    with pytest.raises(
        CheckpointWriteError,
        match=f"cannot write checkpoint {tmp_path / FOLDER / 'round_3' / file_name(0, 2)}: No space",
    ):
        write_process_state(tmp_path / FOLDER / "round_3", 0, 2, {"clients": {}})
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before


# ----------------------------------------------------------------- finding the checkpoint


@pytest.mark.parametrize("ckpt_path", ["last", "auto"])
def test_last_and_auto_take_the_previous_checkpoint_when_last_is_gone(tmp_path, ckpt_path):
    folder = tmp_path / "version_0" / "checkpoints"
    _two_checkpoints(folder)
    (folder / LAST).unlink()
    assert resolve_checkpoint(ckpt_path, tmp_path) == folder / PREVIOUS


def test_a_read_only_folder_is_one_line_even_when_the_clean_up_is_refused_too(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(torch, "save", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(
        CheckpointWriteError,
        match=f"^cannot write checkpoint {tmp_path}/last.ckpt: Read-only file "
        f"system; make {tmp_path} writable and resume with --ckpt_path last$",
    ):
        save_checkpoint(tmp_path / "last.ckpt", {"round": 1})
