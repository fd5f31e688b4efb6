"""A collective that failed because another process of the run stopped answering or died, said in one line."""

import os
import re
import traceback
from typing import TYPE_CHECKING

from lightfed.errors import LightfedError

if TYPE_CHECKING:
    from lightfed.run.trainer_base import TrainerBase

# the innermost of these frames says where the run was: (file, function) -> words (rounds 1-based)
PHASES = {
    ("engine.py", "run"): "in the reduction of round {next}",
    ("trainer.py", "_checkpoint"): "while the checkpoint of round {done} was written",
    ("evaluation.py", "global_model"): "in the evaluation of round {done}",
    ("evaluation.py", "clients"): "in the per-client evaluation of round {done}",
}


class ProcessLostError(LightfedError, RuntimeError):
    """Another process of the run stopped answering or died."""


def collective_failed(error: BaseException) -> bool:
    """Whether ``error`` came out of a torch.distributed call: a peer timed out or closed its connection (gloo's
    errors are plain RuntimeErrors that name neither the process nor the run)."""
    frames = traceback.extract_tb(error.__traceback__)
    innermost = frames[-1].filename.replace(os.sep, "/") if frames else ""
    return isinstance(error, RuntimeError) and "/torch/distributed/" in innermost


def timed_out(error: BaseException) -> bool:
    return "timed out" in str(error).lower()


def lost_process_line(error: BaseException, trainer: "TrainerBase", fit: bool, lost: tuple[int, str] | None) -> str:
    """What happened, where, and what to do. ``lost``: the process that died or was stopped and how
    (``(1, "died (killed by SIGKILL)")``) where this process knows it; with two processes it is the other one."""
    world = trainer.fabric.world_size
    if lost is None and world == 2:
        lost = (1 - trainer.fabric.global_rank, "")
    who, how = (f"process {lost[0]} of {world}", lost[1]) if lost is not None else (f"one of the {world} processes", "")
    if timed_out(error):
        waited = f"did not answer for {trainer.processes.collective_timeout:g} s (trainer.collective_timeout)"
        how = f"{how} and {waited}" if how else waited
    elif not how:
        how = f"closed its connection (it failed or died: {_reason(error)})"
    if not fit:
        advice = "run the command again"
    elif trainer.log_dir is not None and trainer.checkpoint_path.is_file():
        advice = f"{trainer.checkpoint_path} holds the run's last checkpoint: resume with --ckpt_path last"
    else:
        advice = "no checkpoint was written: start the run again"
    return f"{who} {how} {_where(error, trainer.round)}; {advice}"


def _reason(error: BaseException) -> str:
    """gloo's own words without its source location: ``Connection closed by peer [10.0.0.2]:49378``."""
    return re.sub(r"^\[[^\]]*\]\s*", "", str(error).strip()).split(". ")[0].split("\n")[0]


def _where(error: BaseException, done: int) -> str:
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        phase = PHASES.get((os.path.basename(frame.filename), frame.name))
        if phase is not None and f"{os.sep}lightfed{os.sep}" in frame.filename:
            return phase.format(next=done + 1, done=done)
    return f"after round {done}" if done else "before the first round"
